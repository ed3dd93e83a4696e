"""Generated expansions: a transformers causal LM, its chat template, batched and seeded.

Each query's prompt is the method's template (``{query}``, and for LameR ``{passages}``: the
top passages of an upstream run, each cut to ``passage_words`` words) sent as the user turn
after an optional system turn, rendered by the tokenizer's own chat template. Prompts are
generated in batches of ``batch_size`` with left padding, longest first (less padding); every
batch starts from ``torch.manual_seed(seed + batch number)``, so the texts depend only on the
inputs and settings in the key, not on what ran before in the process.

Local folders (and ``pkg:<module>``) always load; a hub id loads only with ``online=True``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.frame import expansion_frame
from medbench_core.retrieval.expansion.spec import ExpansionSpec, generation_identity
from medbench_core.taskdata.task import Task

_PLACEHOLDER = re.compile(r"\{(query|passages)\}")
_REVISION_SUFFIXES = (".jinja",)  # chat templates saved beside tokenizer_config.json (transformers >= 4.47)


def generator_revision(spec: ExpansionSpec) -> str:
    """The generator's revision: a local folder's content hash (weights, configs, tokenizer and chat
    template files), else the pinned revision of a hub id."""
    from medbench_core.retrieval.weights import folder_revision, resolve_model_path

    path = resolve_model_path(spec.resolve_path(spec.generator))
    if Path(path).is_dir():
        rev = folder_revision(path)
        extra = sorted(p for p in Path(path).rglob("*") if p.is_file() and p.suffix in _REVISION_SUFFIXES and ".cache" not in p.relative_to(path).parts)
        if extra:
            import hashlib

            h = hashlib.sha256(rev.encode())
            for p in extra:
                h.update(str(p.relative_to(path)).encode())
                h.update(p.read_bytes())
            rev = "sha256:" + h.hexdigest()[:16]
        return rev
    if not spec.revision:
        raise DataError(f"expansion {spec.name}: generator {spec.generator!r} is a hub id; pin its 'revision' (a commit) so the texts can be reproduced")
    return spec.revision


_REVISIONS: dict[tuple, str] = {}


def cached_generator_revision(spec: ExpansionSpec) -> str:
    """:func:`generator_revision`, hashed again only when a file of the folder changed (name, size or
    mtime): the registry's versions are computed on every sensor tick, and a generator's weights
    are gigabytes."""
    from medbench_core.retrieval.weights import resolve_model_path

    path = resolve_model_path(spec.resolve_path(spec.generator))
    if not Path(path).is_dir():
        return generator_revision(spec)
    stamp = tuple(sorted((str(p), st.st_size, st.st_mtime_ns) for p in Path(path).rglob("*") if p.is_file() for st in (p.stat(),)))
    key = (path, stamp)
    if key not in _REVISIONS:
        _REVISIONS[key] = generator_revision(spec)
    return _REVISIONS[key]


def render(template: str, query: str, passages: str = "") -> str:
    """The template with ``{query}`` and ``{passages}`` replaced in one pass (text that itself
    contains a placeholder is not substituted again; other braces are left alone)."""
    values = {"query": query, "passages": passages}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def cut_words(text: str, n: int) -> str:
    """The first ``n`` whitespace-separated words of ``text``, on one line (R2MED's cut)."""
    return " ".join(text.split()[:n])


def lamer_passages(run: pl.DataFrame, task: Task, k: int = 10, words: int = 512) -> dict[str, str]:
    """query id -> the top ``k`` documents of ``run``, each cut to ``words`` words, as R2MED writes
    them (generate_hypothetical_doc.py lines 31-35 and 52-58 at 62b7074): ``"\\n[1]. text\\n[2]. text"``,
    every passage after a line break, so the template's ``{passages}`` follows its heading directly."""
    text = dict(zip(task.corpus["doc_id"].to_list(), task.doc_text()))
    out: dict[str, str] = {}
    for (qid,), grp in run.sort("query_id", "rank").group_by("query_id", maintain_order=True):
        docs = grp["doc_id"].to_list()[:k]
        unknown = [d for d in docs if d not in text]
        if unknown:
            raise DataError(f"upstream run names document(s) {unknown[:5]} that task {task.name} does not have; is it the run of this task?")
        out[str(qid)] = "".join(f"\n[{i}]. {cut_words(text[d], words)}" for i, d in enumerate(docs, start=1))
    missing = [q for q in task.queries["query_id"].to_list() if q not in out]
    if missing:
        raise DataError(f"upstream run has no documents for {len(missing)} query id(s) of task {task.name}, e.g. {missing[:5]}")
    return out


def user_messages(spec: ExpansionSpec, task: Task, template: str, upstream_run: pl.DataFrame | None = None) -> tuple[list[str], list[str]]:
    """``(query ids, user turns)`` of the task's queries, in task order."""
    qids = task.queries["query_id"].to_list()
    texts = task.queries["text"].fill_null("").to_list()
    if spec.method == "lamer":
        if upstream_run is None:
            raise DataError(f"expansion {spec.name}: lamer needs the upstream run of {spec.upstream!r} on task {task.name}")
        passages = lamer_passages(upstream_run, task, spec.upstream_k, spec.passage_words)
        return qids, [render(template, t, passages[q]) for q, t in zip(qids, texts)]
    return qids, [render(template, t) for t in texts]


@dataclass(frozen=True)
class Generation:
    """One generated text with its token counts."""

    text: str
    prompt_tokens: int
    generated_tokens: int


class Generator:
    """A causal LM and its tokenizer (which must carry a chat template)."""

    def __init__(self, path: str, *, revision: str = "", online: bool = False, device: str = "cpu", dtype: str = "float32"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from medbench_core.retrieval.weights import resolve_model_path

        resolved = resolve_model_path(path)
        local = Path(resolved).is_dir()
        if not local and not online:
            raise DataError(f"generator {path!r} is not a local folder; a hub id loads only with online=True (or download it and give the folder)")
        kwargs: dict[str, Any] = {"local_files_only": not online}
        if not local and revision:
            kwargs["revision"] = revision
        if dtype not in ("float32", "bfloat16", "float16"):
            raise DataError(f"generator {path!r}: dtype {dtype!r} unknown; use float32, bfloat16 or float16")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(resolved, **kwargs)
            self.model = AutoModelForCausalLM.from_pretrained(resolved, dtype=getattr(torch, dtype), **kwargs).to(device).eval()
        except (OSError, ValueError) as exc:
            raise DataError(f"generator {path!r}: cannot load a causal LM from {resolved!r} ({exc})") from exc
        if not getattr(self.tokenizer, "chat_template", None):
            raise DataError(f"generator {path!r}: its tokenizer has no chat template; medbench sends prompts as chat turns")
        self.tokenizer.padding_side = "left"
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        if eos is None:
            raise DataError(f"generator {path!r}: neither the model nor the tokenizer names an end-of-sequence token")
        self.eos_ids = set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}
        if self.pad_id is None:
            self.pad_id = min(self.eos_ids)
        self.device = device
        self.path = path

    def chat_prompts(self, users: list[str], system: str = "", chat_template_kwargs: dict[str, Any] | None = None) -> list[str]:
        """Each user turn (after ``system``, when given) rendered by the chat template, ready for the reply."""
        out = []
        for u in users:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": u}]
            out.append(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})))
        return out

    def encode(self, prompts: list[str]):
        """Token ids and attention mask of ``prompts``, left-padded. The chat template already wrote
        the special tokens the model expects, so the tokenizer adds none."""
        return self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False).to(self.device)

    def generate_kwargs(self, decoding: dict[str, Any]) -> dict[str, Any]:
        """Every sampling knob explicitly, so none comes from the folder's generation_config.json."""
        sample = decoding["temperature"] > 0
        kw: dict[str, Any] = {
            "do_sample": sample,
            "max_new_tokens": decoding["max_new_tokens"],
            "repetition_penalty": decoding["repetition_penalty"],
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids),
        }
        if sample:
            kw.update(temperature=decoding["temperature"], top_p=decoding["top_p"], top_k=decoding["top_k"])
        else:
            kw.update(temperature=None, top_p=None, top_k=None)
        return kw

    def generated_length(self, ids: list[int]) -> int:
        """Tokens generated up to and including the first end-of-sequence token (padding after it excluded)."""
        for i, t in enumerate(ids):
            if t in self.eos_ids:
                return i + 1
        return len(ids)

    def generate(self, prompts: list[str], decoding: dict[str, Any], batch_size: int = 8, progress: bool = False) -> list[Generation]:
        """Generate one reply per prompt (see the module docstring for batching and seeding)."""
        import torch
        from tqdm.auto import tqdm

        # Tokenised once: the lengths order the batches, each batch is padded from these ids.
        ids = self.tokenizer(prompts, add_special_tokens=False, return_token_type_ids=False, return_attention_mask=False)["input_ids"] if prompts else []
        lengths = [len(x) for x in ids]
        order = sorted(range(len(prompts)), key=lambda i: -lengths[i])  # stable: ties keep task order
        results: list[Generation | None] = [None] * len(prompts)
        kw = self.generate_kwargs(decoding)
        with tqdm(total=len(prompts), desc="generate", unit="query", disable=not progress) as bar, torch.inference_mode():
            for b, start in enumerate(range(0, len(order), batch_size)):
                idx = order[start : start + batch_size]
                batch = self.tokenizer.pad({"input_ids": [ids[i] for i in idx]}, padding=True, return_tensors="pt", return_attention_mask=True).to(self.device)
                torch.manual_seed(decoding["seed"] + b)
                out = self.model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **kw)
                new = out[:, batch["input_ids"].shape[1] :].tolist()
                for row, i in enumerate(idx):
                    n = self.generated_length(new[row])
                    text = self.tokenizer.decode(new[row][:n], skip_special_tokens=True)
                    results[i] = Generation(text=text, prompt_tokens=lengths[i], generated_tokens=n)
                bar.update(len(idx))
        return [r for r in results if r is not None]


def generate_expansions(
    spec: ExpansionSpec,
    task: Task,
    template: str,
    *,
    upstream_run: pl.DataFrame | None = None,
    upstream_run_key: str | None = None,
    generator: Generator | None = None,
    revision: str | None = None,
    online: bool = False,
    device: str = "cpu",
    progress: bool = False,
) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any]]:
    """Generate the expansion of every query of ``task``: ``(frame, identity, info)``.

    ``template`` is the prompt template's text (:func:`~medbench_core.retrieval.expansion.spec.prompt_text`);
    for lamer, ``upstream_run`` is the upstream model's run on this task and ``upstream_run_key``
    its provenance key. ``generator`` may be passed in to reuse a loaded model. ``info`` holds
    the token counts, seconds and tokens per second of the generation itself.
    """
    revision = revision or generator_revision(spec)
    identity = generation_identity(spec, revision=revision, prompt=template, upstream_run_key=upstream_run_key)
    qids, users = user_messages(spec, task, template, upstream_run)
    gen = generator or Generator(spec.resolve_path(spec.generator), revision=spec.revision, online=online, device=device, dtype=spec.dtype)
    prompts = gen.chat_prompts(users, spec.system, spec.chat_template_kwargs)
    decoding = spec.resolved_decoding()
    t0 = time.perf_counter()
    outs = gen.generate(prompts, decoding, spec.batch_size, progress)
    seconds = time.perf_counter() - t0
    rows = [
        {"query_id": q, "raw": o.text, "prompt": p, "prompt_tokens": o.prompt_tokens, "generated_tokens": o.generated_tokens}
        for q, p, o in zip(qids, prompts, outs)
    ]
    frame = expansion_frame(rows, spec.reasoning_rule())
    n_new = sum(o.generated_tokens for o in outs)
    info = {
        "source": "generate",
        "generator": spec.generator,
        "revision": revision,
        "method": spec.method,
        "decoding": decoding,
        "batch_size": spec.batch_size,
        "n_queries": len(qids),
        "prompt_tokens": sum(o.prompt_tokens for o in outs),
        "generated_tokens": n_new,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(n_new / seconds, 2) if seconds > 0 else None,
        "upstream_run": upstream_run_key,
    }
    return frame, identity, info
