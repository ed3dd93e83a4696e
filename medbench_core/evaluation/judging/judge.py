"""A local causal LM as a relevance judge: prompts, batching, constrained grades, a pair cache.

Each pair's prompt is the template (:mod:`.prompt`) sent as the user turn after an optional system
turn, rendered by the tokenizer's own chat template (the model is loaded by
:class:`medbench_core.retrieval.expansion.generate.Generator`: local folders and ``pkg:`` always,
a hub id only online, at its pinned revision). Prompts are judged in batches of ``batch_size``,
longest first, left-padded.

- ``decode: constrained`` (default): the assistant's reply is begun with UMBRELA's marker
  ``##final score: `` and one forward pass gives the next-token logits (the LM head over the last
  position only, ``logits_to_keep=1``); the grade is the allowed
  grade whose token scores highest, and the softmax over the grade tokens is kept
  (``probabilities``). Every pair gets a grade, deterministic, and no parsing is needed. Each
  grade must be one token after the marker (true of the digit tokens of BERT, Llama and Qwen
  tokenizers); a tokenizer where it is not is refused, naming it (use ``decode: generate``).
  Position ids follow the attention mask, so left padding does not shift positions.
- ``decode: generate``: greedy generation of up to ``max_new_tokens``, then :func:`~.prompt.parse_grade`;
  a reply stating no allowed grade is *unparsed* (no grade, counted).

**Cache.** A judged pair is stored under the judge's identity (model revision, prompt template,
system turn, decoding, grades, batch size, dtype, passage cut: :func:`~.spec.judge_identity`)
and the sha256 of its query and passage texts, so a pool that grows (a new model's run) judges only
its new pairs. Each judged row records whether it came from the cache. Batching neighbours can
move logits in their last bits, so a cached grade may differ, on a near tie, from the grade a run
from nothing would give; the cache is per judge identity, never shared across identities.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation.judging.prompt import MARKER, parse_grade, render

CACHE_SCHEMA: dict[str, pl.DataType] = {
    "pair": pl.Utf8, "judge_grade": pl.Int64, "raw": pl.Utf8, "probabilities": pl.List(pl.Float64), "prompt_tokens": pl.Int64, "generated_tokens": pl.Int64,
}  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """One pair's judgement: the judge's grade (None: unparsed), its reply, the grade probabilities
    (constrained decoding), token counts and whether it came from the cache."""

    judge_grade: int | None
    raw: str
    probabilities: tuple[float, ...] = ()
    prompt_tokens: int = 0
    generated_tokens: int = 0
    from_cache: bool = False


def pair_key(query: str, passage: str) -> str:
    """sha256 of a pair's texts: its key in the cache."""
    return hashlib.sha256(query.encode("utf-8") + b"\0" + passage.encode("utf-8")).hexdigest()


def identity_key(identity: dict[str, Any]) -> str:
    """A short sha256 of a judge identity: the cache file's name."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]


class PairCache:
    """Judged pairs of one judge identity, in a Parquet file (read once, written atomically by :meth:`save`)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self.rows: dict[str, dict[str, Any]] = {}
        self._new = 0
        if self.path is not None and self.path.is_file():
            try:
                frame = pl.read_parquet(self.path)
            except Exception:  # a torn or foreign file: judged again, rewritten whole on save
                frame = pl.DataFrame(schema=CACHE_SCHEMA)
            self.rows = {r["pair"]: r for r in frame.iter_rows(named=True)}

    def get(self, key: str) -> Verdict | None:
        r = self.rows.get(key)
        if r is None:
            return None
        return Verdict(r["judge_grade"], r["raw"], tuple(r["probabilities"] or ()), int(r["prompt_tokens"] or 0), int(r["generated_tokens"] or 0), True)

    def put(self, key: str, v: Verdict) -> None:
        self.rows[key] = {"pair": key, "judge_grade": v.judge_grade, "raw": v.raw, "probabilities": list(v.probabilities),
                          "prompt_tokens": v.prompt_tokens, "generated_tokens": v.generated_tokens}  # fmt: skip
        self._new += 1

    def save(self) -> None:
        if self.path is None or not self._new:
            return
        from medbench_core.storage import write_with

        self.path.parent.mkdir(parents=True, exist_ok=True)
        frame = pl.DataFrame(list(self.rows.values()), schema=CACHE_SCHEMA, orient="row")
        write_with(self.path, lambda tmp: frame.write_parquet(tmp, statistics=False))
        self._new = 0


class LLMJudge:
    """A loaded causal LM judging pairs with one template, decoding rule and set of grades."""

    def __init__(self, generator, template: str, *, grades: tuple[int, ...] = (0, 1, 2, 3), decode: str = "constrained", system: str = "",
                 batch_size: int = 8, max_new_tokens: int = 32) -> None:  # fmt: skip
        self.gen = generator
        self.template = template
        self.grades = tuple(grades)
        self.decode = decode
        self.system = system
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self._grade_ids: list[int] | None = None

    def prompts(self, queries: list[str], passages: list[str]) -> list[str]:
        """Each pair's chat-rendered prompt, ready for the reply (with the marker begun under constrained decoding)."""
        users = [render(self.template, q, p) for q, p in zip(queries, passages)]
        chats = self.gen.chat_prompts(users, self.system)
        return [c + MARKER for c in chats] if self.decode == "constrained" else chats

    def grade_token_ids(self) -> list[int]:
        """The token id of each grade right after the marker; refused when a grade is not one token."""
        if self._grade_ids is None:
            tok = self.gen.tokenizer
            base = tok(MARKER, add_special_tokens=False)["input_ids"]
            ids = []
            for g in self.grades:
                full = tok(MARKER + str(g), add_special_tokens=False)["input_ids"]
                if full[: len(base)] != base or len(full) != len(base) + 1:
                    raise DataError(
                        f"judge {self.gen.path!r}: its tokenizer does not write grade {g} as one token after {MARKER!r} "
                        "(constrained decoding needs it); use decode: generate"
                    )
                ids.append(full[-1])
            if len(set(ids)) != len(ids):
                raise DataError(f"judge {self.gen.path!r}: two grades share a token after {MARKER!r}; use decode: generate")
            self._grade_ids = ids
        return self._grade_ids

    def judge(self, queries: list[str], passages: list[str], cache: PairCache | None = None, progress: bool = False) -> tuple[list[Verdict], dict[str, Any]]:
        """A :class:`Verdict` per pair (in order) and timing: ``seconds`` of the model's own work
        (forward passes or ``generate``), ``seconds_total`` of the whole call, pairs judged and cached."""
        t_all = time.perf_counter()
        keys = [pair_key(q, p) for q, p in zip(queries, passages)]
        out: list[Verdict | None] = [cache.get(k) if cache else None for k in keys]
        todo = [i for i, v in enumerate(out) if v is None]
        model_seconds = 0.0
        if todo:
            prompts = self.prompts([queries[i] for i in todo], [passages[i] for i in todo])
            run = self._constrained if self.decode == "constrained" else self._generate
            verdicts, model_seconds = run(prompts, progress)
            for i, v in zip(todo, verdicts):
                out[i] = v
                if cache is not None:
                    cache.put(keys[i], v)
        if cache is not None:
            cache.save()
        info = {"pairs": len(keys), "judged": len(todo), "from_cache": len(keys) - len(todo), "seconds": round(model_seconds, 4),
                "seconds_total": round(time.perf_counter() - t_all, 4)}  # fmt: skip
        return [v for v in out if v is not None], info

    def _batches(self, prompts: list[str]):
        tok = self.gen.tokenizer
        ids = tok(prompts, add_special_tokens=False, return_token_type_ids=False, return_attention_mask=False)["input_ids"]
        order = sorted(range(len(prompts)), key=lambda i: -len(ids[i]))  # longest first: less padding; stable
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            batch = tok.pad({"input_ids": [ids[i] for i in idx]}, padding=True, return_tensors="pt", return_attention_mask=True).to(self.gen.device)
            yield idx, batch, [len(ids[i]) for i in idx]

    def _constrained(self, prompts: list[str], progress: bool) -> tuple[list[Verdict], float]:
        import torch

        grade_ids = self.grade_token_ids()
        out: list[Verdict | None] = [None] * len(prompts)
        seconds = 0.0
        with torch.inference_mode():
            for idx, batch, lengths in self._batches(prompts):
                mask = batch["attention_mask"]
                positions = (mask.cumsum(-1) - 1).clamp(min=0)
                t0 = time.perf_counter()
                logits = self._last_logits(batch["input_ids"], mask, positions)
                chosen = logits[:, grade_ids].float()
                seconds += time.perf_counter() - t0
                probs = torch.softmax(chosen, dim=-1).tolist()
                best = chosen.argmax(dim=-1).tolist()
                for row, i in enumerate(idx):
                    g = self.grades[best[row]]
                    out[i] = Verdict(g, f"{MARKER}{g}", tuple(round(p, 6) for p in probs[row]), lengths[row], 1)
        return [v for v in out if v is not None], seconds

    def _last_logits(self, input_ids, mask, positions):
        """The next-token logits at the last position only (``logits_to_keep=1``: the LM head over one
        position, not the whole prompt, a vocabulary-sized row per token otherwise); models whose
        forward does not take it compute them all."""
        try:
            out = self.gen.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, logits_to_keep=1)
        except TypeError:
            out = self.gen.model(input_ids=input_ids, attention_mask=mask, position_ids=positions)
        return out.logits[:, -1, :]

    def _generate(self, prompts: list[str], progress: bool) -> tuple[list[Verdict], float]:
        decoding = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": self.max_new_tokens, "seed": 0, "repetition_penalty": 1.0}
        t0 = time.perf_counter()
        gens = self.gen.generate(prompts, decoding, self.batch_size, progress)
        seconds = time.perf_counter() - t0
        return [Verdict(parse_grade(g.text, self.grades), g.text, (), g.prompt_tokens, g.generated_tokens) for g in gens], seconds
