"""The judge's prompt (UMBRELA's 0-3 grading by default) and the constrained parsing of its grade.

The default template, ``prompts/umbrela.txt``, is UMBRELA's zero-shot "bing" prompt, byte for byte
(github.com/castorini/umbrela, ``src/umbrela/prompts/qrel_zeroshot_bing.txt`` at 16cba3e; 1,341
characters once stripped, as UMBRELA's ``LLMJudge`` reads it), after Thomas et al.'s prompt for
Bing (arXiv 2309.10621); Upadhyay et al., arXiv 2406.06519. Its placeholders ``{query}`` and
``{passage}`` are filled in one pass (text that itself holds a placeholder is not filled again).

**Parsing.** UMBRELA asks for ``##final score: <n>`` and reads the reply with a cascade of loose
patterns ending in "any digit 0-3 anywhere", falling back to 0 (``result_status`` 0) when none
matches (``parse_fewshot_response`` in ``src/umbrela/utils/common_utils.py``). A fallback grade
of 0 would enter the qrels as a judged non-relevant document. Here a reply yields a grade only if
it holds UMBRELA's marker (``##final score`` then an optional ``:``/``=``/``-`` and one of the
allowed grades; the last such marker wins) or is nothing but one allowed grade; anything else is
*unparsed*: kept with its text, counted, and left out of the qrels (the pair stays a hole).
With ``decode: constrained`` (the default) no parsing is needed: the judge's next token after
the marker is chosen among the grade tokens (:mod:`.judge`).
"""

from __future__ import annotations

import re
from pathlib import Path

from medbench_core.errors import DataError

MARKER = "##final score: "
_PLACEHOLDER = re.compile(r"\{(query|passage)\}")
_FINAL = re.compile(r"##\s*final\s+score\s*[:=-]?\s*(\d)\b", re.IGNORECASE)
DEFAULT_PROMPT = "umbrela.txt"


def prompt_file(spec, prompts_dir: str | Path | None = None) -> Path:
    """The template of ``spec``: its ``prompt`` (relative to models.yaml's folder), else ``<prompts>/umbrela.txt``."""
    if spec.prompt:
        p = Path(spec.resolve_path(spec.prompt, local=True))
    else:
        root = Path(prompts_dir) if prompts_dir is not None else Path(spec.base_dir or ".") / "prompts"
        p = root / DEFAULT_PROMPT
    if not p.is_file():
        raise DataError(f"judgement {spec.name}: prompt template {p} not found")
    return p


def prompt_text(spec, prompts_dir: str | Path | None = None) -> str:
    """The template's text, stripped as UMBRELA reads it; it must hold ``{query}`` and ``{passage}``."""
    path = prompt_file(spec, prompts_dir)
    text = path.read_text(encoding="utf-8").strip()
    missing = [p for p in ("{query}", "{passage}") if p not in text]
    if missing:
        raise DataError(f"{path}: the judge's template has no {' or '.join(missing)} placeholder")
    return text


def render(template: str, query: str, passage: str) -> str:
    """The template with ``{query}`` and ``{passage}`` replaced in one pass."""
    values = {"query": query, "passage": passage}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def cut_words(text: str, n: int) -> str:
    """The first ``n`` whitespace-separated words of ``text``, on one line."""
    return " ".join((text or "").split()[:n])


def parse_grade(reply: str, grades: tuple[int, ...] = (0, 1, 2, 3)) -> int | None:
    """The grade a reply states (module docstring), or None when it states none of ``grades``."""
    reply = (reply or "").strip()
    found = [int(m.group(1)) for m in _FINAL.finditer(reply)]
    found = [g for g in found if g in grades]
    if found:
        return found[-1]
    if reply.isdigit() and len(reply) == 1 and int(reply) in grades:
        return int(reply)
    return None
