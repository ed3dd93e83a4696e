"""Expansion entries (the ``expansions:`` section of ``models.yaml``) and their provenance keys.

An expansion is one way of writing a text per query before retrieval: a method (``hyde``,
``query2doc``, ``lamer``) and a source, either ``file`` (published texts, e.g. R2MED's) or
``generate`` (a transformers causal LM run here). Schema of an entry::

    expansions:
      - name: hyde-gpt4                  # referenced by `expansion:` in an expanded model entry
        method: hyde                     # hyde | query2doc | lamer
        source: file
        path: /data/r2med-gar            # a local folder, or hub:<owner>/<name> (a dataset repo); may hold {task}
        revision: ""                     # required for hub:...; the commit to read
        format: r2med                    # r2med (id, text, hy_doc) | jsonl (id, expansion) | parquet (query_id, expansion)
        generator: gpt4                  # R2MED's generator folder; the generator's id in the key
        file: "{task}/{method}/{generator}/query_with_hydoc.jsonl"   # default per format ({task}/ left out when `path` holds {task})
        task_folders: {r2med_biology: Biology}                      # medbench task -> {task} in `path` and `file`
        reasoning: auto                  # auto | think | huatuo | sky | answer | none (expansion/frame.py)
      - name: hyde-qwq                   # all eight R2MED tasks, each from its own hub dataset, read from the hub cache
        method: hyde
        source: file
        generator: qwq-32b
        path: "hub:R2MED/{task}"         # R2MED/Biology, ...: hyde/qwq-32b/query_with_hydoc.jsonl in each
        revisions: {Biology: 8b9fec2db9eda4b5742d03732213fbaee8169556, ...}   # per {task} value (or medbench task)
        task_folders: {r2med_biology: Biology, ...}
      - name: hyde-local
        method: hyde
        source: generate
        generator: ./models/qwen2.5-0.5b-instruct   # local folder, pkg:<module>, or a hub id (online only)
        revision: ""                     # a hub id's commit; a folder is identified by its content hash
        prompt: prompts/hyde.txt         # default prompts/<method>/<task>.txt (R2MED's per task: hyde, query2doc, lamer), else prompts/<method>.txt
        system: "You are a helpful assistant."
        chat_template_kwargs: {}         # e.g. {enable_thinking: true} for Qwen3
        decoding: {temperature: 0.7, top_p: 1.0, top_k: 0, max_new_tokens: 10240, seed: 42, repetition_penalty: 1.0}   # R2MED's
        batch_size: 8
        dtype: float32
      - name: lamer-local                # LameR: the prompt also carries an upstream run's top passages
        method: lamer
        source: generate
        generator: ./models/qwen2.5-0.5b-instruct
        upstream: bm25                   # a model of the registry; its run on the same task
        upstream_k: 10
        passage_words: 512

Relative paths (``path``, ``generator``, ``prompt``) resolve against the folder of ``models.yaml``.
A hub dataset is read from the local hub cache at its pinned revision, and downloaded only when
the run is online. ``reasoning: auto`` (the default) applies, to a published file, the rule
R2MED's code applies to that generator (:func:`~medbench_core.retrieval.expansion.frame.rule_for_generator`:
``</think>`` for R1 distills, QwQ and Qwen3, ``Final Response`` for HuatuoGPT-o1, Sky-T1's solution
tags, Search-R1's ``<answer>``, the whole text otherwise), and ``think`` to a generated one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError, config_errors
from medbench_core.provenance import artifact_key
from medbench_core.retrieval.expansion.frame import RULES, rule_for_generator
from medbench_core.yaml_file import read_yaml_mapping

METHODS = ("hyde", "query2doc", "lamer", "search-r1", "search-o1")
# Search-R1 and Search-o1 are agents that search and reason in several turns (R2MED's rows read
# their published outputs); medbench generates single-turn prompts only, so these are files only.
FILE_ONLY_METHODS = ("search-r1", "search-o1")
SOURCES = ("file", "generate")
FORMATS = ("r2med", "jsonl", "parquet")
REASONING = ("auto", *RULES)
DEFAULT_FILES = {
    "r2med": "{task}/{method}/{generator}/query_with_hydoc.jsonl",
    "jsonl": "{task}.jsonl",
    "parquet": "{task}.parquet",
}
# R2MED's open-model settings (generate_hypothetical_doc.py l.247 at 62b7074: SamplingParams(temperature=0.7,
# seed=42, max_tokens=10240)): up to 10,240 new tokens, so a reasoning model reaches its </think>; top_k 0
# and top_p 1.0 switch those filters off, as vLLM's defaults do; every value is passed to generate
# explicitly, so none comes from the model folder's generation_config.json.
DEFAULT_DECODING = {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_new_tokens": 10240, "seed": 42, "repetition_penalty": 1.0}
DEFAULT_SYSTEM = "You are a helpful assistant."
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_FILE_ONLY = ("path", "format", "file", "task_folders", "revisions")
_GENERATE_ONLY = ("prompt", "system", "chat_template_kwargs", "decoding", "batch_size", "dtype")
_LAMER_ONLY = ("upstream", "upstream_k", "passage_words")


@dataclass(frozen=True)
class ExpansionSpec:
    """One entry of the ``expansions:`` section (see the module docstring for the fields)."""

    name: str
    method: str
    source: str
    generator: str = ""
    revision: str = ""
    path: str = ""
    format: str = "r2med"
    file: str = ""
    task_folders: dict[str, str] = field(default_factory=dict)
    revisions: dict[str, str] = field(default_factory=dict)  # a hub path with {task}: its value (or the medbench task) -> commit
    reasoning: str = "auto"
    prompt: str = ""
    system: str = DEFAULT_SYSTEM
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 8
    dtype: str = "float32"
    upstream: str = ""
    upstream_k: int = 10
    passage_words: int = 512
    base_dir: str = ""  # where models.yaml lives: relative paths resolve here (not part of the identity)

    def __post_init__(self) -> None:
        where = f"expansion {self.name!r}"
        if not _NAME_RE.match(self.name):
            raise DataError(f"{where}: use letters, digits, '.', '_', '+' or '-' in the name (it becomes a folder name)")
        if self.method not in METHODS:
            raise DataError(f"{where}: unknown method {self.method!r}; known: {', '.join(METHODS)}")
        if self.source not in SOURCES:
            raise DataError(f"{where}: unknown source {self.source!r}; known: {', '.join(SOURCES)}")
        if self.reasoning not in REASONING:
            raise DataError(f"{where}: reasoning {self.reasoning!r} unknown; use one of {', '.join(REASONING)} (auto: R2MED's rule for the generator)")
        if not self.generator:
            raise DataError(f"{where}: needs 'generator' (the model folder or hub id; for files, the generator's name)")
        if self.source == "file":
            if not self.path:
                raise DataError(f"{where}: a file expansion needs 'path' (a local folder or hub:<owner>/<name>)")
            if self.format not in FORMATS:
                raise DataError(f"{where}: format {self.format!r} unknown; known: {', '.join(FORMATS)}")
            if self.path.startswith("hub:") and not (self.revision or self.revisions):
                raise DataError(f"{where}: hub dataset {self.path[4:]!r} needs a pinned 'revision' (a commit), or 'revisions' per task")
            if self.revisions and "{task}" not in self.path:
                raise DataError(f"{where}: 'revisions' (one commit per task) needs a path with {{task}}; give one 'revision' instead")
        if self.source == "generate" and self.method in FILE_ONLY_METHODS:
            raise DataError(
                f"{where}: method {self.method} is an agent's multi-turn search and reasoning; medbench reads its published outputs "
                "(source: file, e.g. R2MED's search-r1 config on the hub) but does not run the agent"
            )
        if self.source == "generate":
            unknown = sorted(set(self.decoding) - set(DEFAULT_DECODING))
            if unknown:
                raise DataError(f"{where}: unknown decoding setting(s) {unknown}; known: {sorted(DEFAULT_DECODING)}")
            d = self.resolved_decoding()
            if d["temperature"] < 0 or not 0 < d["top_p"] <= 1 or d["max_new_tokens"] < 1 or d["top_k"] < 0:
                raise DataError(f"{where}: decoding {d} out of range (temperature >= 0, 0 < top_p <= 1, top_k >= 0, max_new_tokens >= 1)")
            if self.batch_size < 1:
                raise DataError(f"{where}: batch_size must be at least 1")
        if self.method == "lamer" and self.source == "generate" and not self.upstream:
            raise DataError(f"{where}: a lamer expansion needs 'upstream' (the model whose run's top passages go in the prompt)")
        if self.method != "lamer" and self.upstream:
            raise DataError(f"{where}: 'upstream' is for method lamer only")
        if self.upstream_k < 1 or self.passage_words < 1:
            raise DataError(f"{where}: upstream_k and passage_words must be at least 1")

    def reasoning_rule(self) -> str:
        """The rule that splits answer from reasoning: ``reasoning``, or for ``auto`` R2MED's rule for
        a published file's generator and ``think`` for a generated one."""
        if self.reasoning != "auto":
            return self.reasoning
        return rule_for_generator(self.generator) if self.source == "file" else "think"

    def resolved_decoding(self) -> dict[str, Any]:
        """Every decoding setting, defaults filled in (all of them enter the key)."""
        d = {**DEFAULT_DECODING, **self.decoding}
        return {
            "temperature": float(d["temperature"]),
            "top_p": float(d["top_p"]),
            "top_k": int(d["top_k"]),
            "max_new_tokens": int(d["max_new_tokens"]),
            "seed": int(d["seed"]),
            "repetition_penalty": float(d["repetition_penalty"]),
        }

    def resolve_path(self, p: str, *, local: bool = False) -> str:
        """``p`` resolved against the registry's folder when it is a relative local path.

        Only ``./`` and ``../`` mark a relative folder, since ``owner/name`` is a hub id; with
        ``local`` (a path that cannot be a hub id) any relative path counts.
        """
        if not p or p.startswith(("hub:", "pkg:")) or Path(p).is_absolute() or not self.base_dir:
            return p
        if local or p.startswith(("./", "../")):
            return str((Path(self.base_dir) / p).resolve())
        return p

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_expansions(entries: Any, where: str | Path) -> list[ExpansionSpec]:
    """Check and build the ``expansions:`` entries of the registry file ``where``."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise DataError(f"{where}: 'expansions:' must be a list of entries")
    known = {f.name for f in dataclasses.fields(ExpansionSpec)} - {"base_dir"}
    out: list[ExpansionSpec] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not {"name", "method", "source"} <= set(e):
            raise DataError(f"{where}: expansions[{i}] needs at least 'name', 'method' and 'source'")
        name = e["name"]
        unknown = sorted(set(e) - known)
        if unknown:
            raise DataError(f"{where}: expansion {name!r} has unknown field(s) {unknown}; known: {sorted(known)}")
        wrong = [k for k in (_GENERATE_ONLY if e["source"] == "file" else _FILE_ONLY if e["source"] == "generate" else ()) if k in e]
        if wrong:
            raise DataError(f"{where}: expansion {name!r} (source {e['source']}) does not take {wrong}")
        if e.get("method") != "lamer" and any(k in e for k in _LAMER_ONLY):
            raise DataError(f"{where}: expansion {name!r}: {[k for k in _LAMER_ONLY if k in e]} are for method lamer only")
        if name in seen:
            raise DataError(f"{where}: expansion name {name!r} appears twice")
        seen.add(name)
        fields = {**e, "revision": str(e.get("revision") or ""), "base_dir": str(Path(where).resolve().parent)}
        for k in ("task_folders", "revisions", "chat_template_kwargs", "decoding"):
            fields[k] = fields.get(k) or {}
        try:
            out.append(ExpansionSpec(**fields))
        except TypeError as exc:
            raise DataError(f"{where}: expansions[{i}] ({name}): {exc}") from exc
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from exc
    return out


@config_errors
def load_expansions(path: str | Path) -> list[ExpansionSpec]:
    """The ``expansions:`` section of the registry file ``path`` (empty when there is none)."""
    path = Path(path)
    doc = read_yaml_mapping(path, "model registry")
    return parse_expansions(doc.get("expansions"), path)


def find_expansion(specs: list[ExpansionSpec], name: str) -> ExpansionSpec:
    for s in specs:
        if s.name == name:
            return s
    raise DataError(f"expansion {name!r} is not in the registry's 'expansions:' section; known: {[s.name for s in specs]}")


# --- prompt templates ---------------------------------------------------------------------


def prompt_file(spec: ExpansionSpec, task: str, prompts_dir: str | Path | None = None) -> Path:
    """The template file for ``spec`` on ``task``.

    ``prompt:`` in the entry names one file for every task. Otherwise ``<prompts>/<method>/<task>.txt``
    when it exists, else ``<prompts>/<method>.txt``; ``<prompts>`` is ``prompts_dir`` or the
    ``prompts`` folder beside the registry file.
    """
    if spec.prompt:
        p = Path(spec.resolve_path(spec.prompt, local=True))
        if not p.is_file():
            raise DataError(f"expansion {spec.name}: prompt template {p} not found")
        return p
    root = Path(prompts_dir) if prompts_dir is not None else Path(spec.base_dir or ".") / "prompts"
    for p in (root / spec.method / f"{task}.txt", root / f"{spec.method}.txt"):
        if p.is_file():
            return p
    raise DataError(
        f"expansion {spec.name}: no prompt template for method {spec.method} ({root / spec.method / (task + '.txt')} or {root / (spec.method + '.txt')})"
    )


def prompt_text(spec: ExpansionSpec, task: str, prompts_dir: str | Path | None = None) -> str:
    """The template's text (it enters the key; placeholders ``{query}`` and, for lamer, ``{passages}``)."""
    path = prompt_file(spec, task, prompts_dir)
    text = path.read_text(encoding="utf-8")
    if "{query}" not in text:
        raise DataError(f"{path}: the template has no {{query}} placeholder")
    if spec.method == "lamer" and "{passages}" not in text:
        raise DataError(f"{path}: a lamer template needs a {{passages}} placeholder for the upstream run's passages")
    return text


# --- provenance ---------------------------------------------------------------------------


def generation_identity(spec: ExpansionSpec, *, revision: str, prompt: str, upstream_run_key: str | None) -> dict[str, Any]:
    """What decides a generated expansion's text, besides the task and the code."""
    ident: dict[str, Any] = {
        "source": "generate",
        "method": spec.method,
        "generator": spec.generator,
        "revision": revision,
        "prompt": prompt,
        "system": spec.system,
        "chat_template_kwargs": spec.chat_template_kwargs,
        "decoding": spec.resolved_decoding(),
        # Left padding and the sampling stream depend on how queries are batched, and the
        # numbers on the dtype: both change the text.
        "batch_size": spec.batch_size,
        "dtype": spec.dtype,
        "reasoning": spec.reasoning_rule(),
    }
    if spec.method == "lamer":
        if not upstream_run_key:
            raise DataError(f"expansion {spec.name}: a lamer expansion's key needs the upstream run's key")
        # "r2med": the passages as R2MED's script writes them ("\n[1]. text"; "[1] text" lines before)
        ident.update(upstream_run=upstream_run_key, upstream_k=spec.upstream_k, passage_words=spec.passage_words, passage_format="r2med")
    return ident


def file_identity(spec: ExpansionSpec, *, file_sha256: str, task_folder: str, hub: tuple[str, str] | None = None) -> dict[str, Any]:
    """What decides a published expansion: its bytes (not where the folder is), how they are read.

    ``hub``: the ``(repository, revision)`` it was read from (its ``{task}`` filled in)."""
    ident: dict[str, Any] = {
        "source": "file",
        "method": spec.method,
        "generator": spec.generator,
        "format": spec.format,
        "file_sha256": file_sha256,
        "task_folder": task_folder,
        "reasoning": spec.reasoning_rule(),
    }
    if spec.path.startswith("hub:"):
        repo, revision = hub or (spec.path[4:], spec.revision)
        ident.update(hub=repo, revision=revision)
    return ident


def expansion_key(task_hash: str, identity: dict[str, Any], code: str) -> str:
    """Provenance key of one expansion x task artifact (the name of its folder).

    The entry's name is left out, so renaming an entry does not change the key of what it wrote.
    """
    return artifact_key(stage="expansion", task=task_hash, expansion=identity, code=code)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
