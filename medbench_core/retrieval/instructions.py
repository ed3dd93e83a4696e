"""Per-task query instructions for instruction-tuned embedders (E5-Mistral, BGE, NV-Embed style).

Model settings:

- ``instructions``: ``{<task name> | <task type> | default: <instruction>}``; a task takes the
  instruction of its name, else of its ``task_type`` (tasks.yaml), else ``default``, else none;
- ``query_template``: how instruction and query are joined, default
  ``"Instruct: {instruction}\\nQuery: {query}"`` (E5-Mistral / NV-Embed); BGE-style models use
  ``"{instruction}{query}"``.

Only queries get instructions (passages are encoded as they are, so one corpus embedding serves
every instruction). The instruction a task resolves to enters that task's run key, not the
corpus embedding key: editing one task's instruction re-runs retrieval for that task only. A
``query_prefix`` still applies, in front of the formatted query.
"""

from __future__ import annotations

from typing import Any

from medbench_core.errors import DataError

DEFAULT_TEMPLATE = "Instruct: {instruction}\nQuery: {query}"
SETTING_KEYS = ("instructions", "query_template")


def uses_instructions(settings: Any) -> bool:
    """True when the model's settings hold instructions (a kind's settings object)."""
    return any(getattr(settings, k, None) is not None for k in SETTING_KEYS)


def resolve(settings: Any, task_name: str, task_type: str = "", model: str = "model") -> tuple[str, str] | None:
    """``(template, instruction)`` for a task, or None when the model has no instruction for it."""
    if not uses_instructions(settings):
        return None
    table = settings.instructions or {}
    if not isinstance(table, dict):
        raise DataError(f"model {model}: instructions must map a task name, task type or 'default' to an instruction")
    template = settings.query_template or DEFAULT_TEMPLATE
    if "{query}" not in template or "{instruction}" not in template:
        raise DataError(f"model {model}: query_template {template!r} needs both {{instruction}} and {{query}}")
    for key in (task_name, task_type, "default"):
        if key and key in table:
            return template, str(table[key])
    return None


def format_queries(texts: list[str | None], prompt: tuple[str, str] | None) -> list[str | None]:
    """Each query text inside the template (image-only queries, text None, stay None)."""
    if prompt is None:
        return list(texts)
    template, instruction = prompt
    # str.replace, not format: a query may hold braces.
    return [None if t is None else template.replace("{instruction}", instruction).replace("{query}", t) for t in texts]


def key_part(settings: Any, task_name: str, task_type: str = "", model: str = "model") -> dict[str, Any]:
    """What enters the run key: the resolved ``(template, instruction)``, or ``{}`` for a model without instructions."""
    if not uses_instructions(settings):
        return {}
    prompt = resolve(settings, task_name, task_type, model)
    return {"query_prompt": list(prompt) if prompt else None}


def _prefix(settings: Any, role: str, language: str | None) -> str:
    per_lang = getattr(settings, "language_prefixes", None) or {}
    if language and language in per_lang and role in per_lang[language]:
        return per_lang[language][role]
    return getattr(settings, f"{role}_prefix", "") or ""


def apply_prefixes(texts: list[str], settings: Any, role: str, languages: list[str] | None) -> list[str]:
    """Each text with the prefix of its ``role`` (``query``, ``passage``, ``expansion``), per language when the settings give one."""
    langs = languages if languages is not None else [None] * len(texts)
    return [_prefix(settings, role, lang) + t for t, lang in zip(texts, langs)]
