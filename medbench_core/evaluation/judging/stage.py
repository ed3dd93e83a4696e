"""The judgement stage of one (judgement x task): its key, and building its artifact from either source."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation.judging.spec import (
    JudgementSpec,
    file_identity,
    generation_identity,
    grade_mapping,
    judge_identity,
    judgement_key,
    text_sha256,
)

SAMPLE = 5  # judged pairs kept in info.json (and logged to MLflow) for a quick look


def stage_code() -> str:
    """Declared output version of the judgement stage (provenance.STAGE_VERSIONS)."""
    from medbench_core.provenance import stage_version

    return stage_version("judgements")


def top_grade(task) -> int:
    """The task's highest grade (at least 1): what the judge's grades are mapped onto."""
    return max(int(task.qrels["relevance"].max() or 1), 1) if task.qrels.height else 1


class _AsGenerator:
    """The fields :func:`medbench_core.retrieval.expansion.generate.generator_revision` reads, of a judge."""

    def __init__(self, spec: JudgementSpec) -> None:
        self.name, self.generator, self.revision, self.resolve_path = spec.name, spec.judge, spec.revision, spec.resolve_path


def judge_revision(spec: JudgementSpec) -> str:
    """A local judge folder's content hash (weights, configs, tokenizer and chat template), else its pinned hub revision."""
    from medbench_core.retrieval.expansion.generate import cached_generator_revision
    from medbench_core.retrieval.weights import resolve_model_path

    path = resolve_model_path(spec.resolve_path(spec.judge))
    if not Path(path).is_dir() and not spec.revision:
        raise DataError(f"judgement {spec.name}: judge {spec.judge!r} is a hub id; pin its 'revision' (a commit) so the judgements can be reproduced")
    return cached_generator_revision(_AsGenerator(spec))


def judgement_identity(
    spec: JudgementSpec, task, *, pool_runs: Mapping[str, str] | None = None, prompts_dir: str | Path | None = None, revision: str | None = None
) -> dict[str, Any]:
    """What decides the judgements of ``task`` (without building them): a file's sha256, or a generating
    judge's revision, prompt text, decoding and pool (each pool model's run key in ``pool_runs``)."""
    if spec.source == "file":
        from medbench_core.storage import sha256_file

        path = spec.task_file(task.name)
        if not path.is_file():
            raise DataError(f"judgement {spec.name}: {path} not found (path: {spec.path})")
        return file_identity(spec, file_sha256=sha256_file(path), top_grade=top_grade(task))
    from medbench_core.evaluation.judging.prompt import prompt_text

    missing = [m for m in spec.resolved_pool()["models"] if m not in (pool_runs or {})]
    if missing:
        raise DataError(f"judgement {spec.name} x {task.name}: the pool model(s) {missing} have no run key here; evaluate them first")
    return generation_identity(spec, revision=revision or judge_revision(spec), prompt=prompt_text(spec, prompts_dir), pool_runs=dict(pool_runs or {}),
                               top_grade=top_grade(task))  # fmt: skip


def judgement_stage_key(spec: JudgementSpec, task, *, code: str | None = None, **kw: Any) -> str:
    """The folder name of the judgements of ``task`` (``Layout.judgement_dir``); ``kw`` as for :func:`judgement_identity`."""
    return judgement_key(task.content_hash(), judgement_identity(spec, task, **kw), code or stage_code())


def load_judge(spec: JudgementSpec, prompts_dir: str | Path | None = None, *, device: str = "cpu", online: bool = False):
    """The :class:`~medbench_core.evaluation.judging.judge.LLMJudge` of a generating entry (its model loaded)."""
    from medbench_core.evaluation.judging.judge import LLMJudge
    from medbench_core.evaluation.judging.prompt import prompt_text
    from medbench_core.retrieval.expansion.generate import Generator

    gen = Generator(spec.resolve_path(spec.judge), revision=spec.revision, online=online, device=device, dtype=spec.dtype)
    return LLMJudge(gen, prompt_text(spec, prompts_dir), grades=spec.grades, decode=spec.decode, system=spec.system,
                    batch_size=spec.batch_size, max_new_tokens=spec.max_new_tokens)  # fmt: skip


def cache_file(cache_dir: str | Path | None, spec: JudgementSpec, *, revision: str, prompt: str) -> Path | None:
    """The pair cache of this judge identity under ``cache_dir`` (None: no cache)."""
    if cache_dir is None:
        return None
    from medbench_core.evaluation.judging.judge import identity_key

    return Path(cache_dir) / f"{identity_key(judge_identity(spec, revision=revision, prompt=prompt))}.parquet"


def build_judgements(
    spec: JudgementSpec,
    task,
    *,
    runs: Mapping[str, pl.DataFrame] | None = None,
    run_keys: Mapping[str, str] | None = None,
    judge=None,
    cache_dir: str | Path | None = None,
    prompts_dir: str | Path | None = None,
    device: str = "cpu",
    online: bool = False,
    progress: bool = False,
    code: str | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Judge the pool of ``task`` (or read its judgement file): ``(frame, info)``.

    A generating entry pools the unjudged top documents of ``runs`` (pool model -> its stored run,
    ``run_keys`` their keys) and a calibration sample (:func:`~.pool.build_pool`), renders UMBRELA's
    prompt, judges in batches through ``judge`` (loaded here when not given), reusing the pair cache
    under ``cache_dir``. ``info`` holds the key and identity, counts (pairs, fill, calibration,
    unparsed, cached), seconds of the judge's own model work and of the whole stage, tokens, the
    agreement of the calibration pairs and a sample.
    """
    from medbench_core.evaluation.judging.agreement import pair_agreement
    from medbench_core.evaluation.judging.frame import judgement_frame

    t0 = time.perf_counter()
    top = top_grade(task)
    mapping = grade_mapping(spec, top)
    # Human-judged pairs (a negative grade is trec_eval's "in the pool, unjudged": a pair to fill, never a calibration pair).
    human = {
        (q, d): int(r)
        for q, d, r in task.qrels.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), "relevance").iter_rows()
        if r is not None and r >= 0
    }
    timing: dict[str, Any] = {}
    if spec.source == "file":
        from medbench_core.evaluation.judging.files import read_judgement_file

        identity = judgement_identity(spec, task)
        read = read_judgement_file(spec, task, spec.task_file(task.name))
        rows = [
            {"query_id": q, "doc_id": d, "role": "calibration" if (q, d) in human else "fill", "human": human.get((q, d)), "judge_grade": g,
             "grade": None if g is None else mapping[g], "raw": raw, "probabilities": [], "from_cache": False}
            for q, d, g, raw in read.iter_rows()
        ]  # fmt: skip
        info: dict[str, Any] = {"source": "file", "file": str(spec.task_file(task.name)), "file_sha256": identity["file_sha256"], "format": spec.format}
    else:
        from medbench_core.evaluation.judging.judge import PairCache
        from medbench_core.evaluation.judging.pool import build_pool, pair_texts
        from medbench_core.evaluation.judging.prompt import prompt_text

        if not runs:
            raise DataError(f"judgement {spec.name} x {task.name}: no pool runs given")
        # A judge passed in may say its own revision (a stub in tests, a model loaded elsewhere).
        revision = getattr(judge, "revision", None) or judge_revision(spec)
        template = prompt_text(spec, prompts_dir)
        identity = judgement_identity(spec, task, pool_runs=run_keys or {}, prompts_dir=prompts_dir, revision=revision)
        p = spec.resolved_pool()
        pool = build_pool(task, {m: runs[m] for m in p["models"]}, depth=p["depth"], calibration=p["calibration"], seed=p["seed"])
        queries, passages = pair_texts(task, pool, spec.passage_words)
        judge = judge or load_judge(spec, prompts_dir, device=device, online=online)
        cache = PairCache(cache_file(cache_dir, spec, revision=revision, prompt=template))
        verdicts, timing = judge.judge(queries, passages, cache, progress)
        rows = [
            {**r, "judge_grade": v.judge_grade, "grade": None if v.judge_grade is None else mapping[v.judge_grade], "raw": v.raw,
             "probabilities": list(v.probabilities), "prompt_tokens": v.prompt_tokens, "from_cache": v.from_cache}
            for r, v in zip(pool.iter_rows(named=True), verdicts)
        ]  # fmt: skip
        n_new = sum(v.generated_tokens for v in verdicts if not v.from_cache)
        info = {"source": "generate", "revision": revision, "prompt_sha256": text_sha256(template), "decode": spec.decode, "batch_size": spec.batch_size,
                "dtype": spec.dtype, "pool": p, "pool_runs": dict(run_keys or {}), "prompt_tokens": sum(v.prompt_tokens for v in verdicts if not v.from_cache),
                "generated_tokens": n_new}  # fmt: skip
    frame = judgement_frame(rows)
    calib = frame.filter((pl.col("role") == "calibration") & pl.col("grade").is_not_null())
    agreement = pair_agreement(calib["human"].to_list(), calib["grade"].to_list(), list(range(top + 1)))
    code = code or stage_code()
    seconds = time.perf_counter() - t0
    judged = timing.get("judged", frame.height)
    info.update(
        judgement=spec.name, task=task.name, task_content_hash=task.content_hash(), key=judgement_key(task.content_hash(), identity, code),
        identity=identity, code=code, judge=spec.judge, top_grade=top, grade_map={str(k): v for k, v in mapping.items()},
        n_pairs=frame.height, n_fill=int((frame["role"] == "fill").sum()), n_calibration=int((frame["role"] == "calibration").sum()),
        n_unparsed=int(frame["grade"].is_null().sum()), n_from_cache=int(frame["from_cache"].fill_null(False).sum()),
        n_fill_relevant=int(frame.filter((pl.col("role") == "fill") & (pl.col("grade") > 0)).height),
        seconds_model=timing.get("seconds"), seconds=round(seconds, 4),
        pairs_per_second=round(judged / timing["seconds_total"], 2) if timing.get("seconds_total") else None,
        agreement=agreement,
        sample=[{k: r[k] for k in ("query_id", "doc_id", "role", "human", "grade", "raw")} for r in frame.head(SAMPLE).iter_rows(named=True)],
    )  # fmt: skip
    return frame, info


def judgement_fingerprint(specs: list[JudgementSpec], tasks: list[str], prompts_dir: str | Path | None = None) -> dict[str, Any]:
    """What decides the judgements of every entry on ``tasks``, without building any (a file's sha256, a
    judge's revision and prompt): the main job's "nothing changed" check hashes it. A pool's run keys
    are not here: they follow the models' versions, which that check hashes already."""
    from medbench_core.errors import MedbenchError
    from medbench_core.storage import sha256_file

    out: dict[str, Any] = {}
    for spec in specs:
        entry: dict[str, Any] = {"entry": spec.to_dict()}
        try:
            if spec.source == "file":
                entry["files"] = {t: sha256_file(spec.task_file(t)) if spec.task_file(t).is_file() else "missing" for t in tasks if spec.judges_task(t)}
            else:
                from medbench_core.evaluation.judging.prompt import prompt_text

                entry["revision"], entry["prompt"] = judge_revision(spec), text_sha256(prompt_text(spec, prompts_dir))
        except MedbenchError as exc:
            entry["unavailable"] = str(exc)
        out[spec.name] = entry
    return out
