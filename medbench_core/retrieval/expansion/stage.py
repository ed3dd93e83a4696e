"""The expansion stage of one (expansion x task): its key, and building its frame from either source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.retrieval.expansion.spec import (
    ExpansionSpec,
    expansion_key,
    file_identity,
    generation_identity,
    prompt_text,
    text_sha256,
)
from medbench_core.taskdata.task import Task

SAMPLE = 5  # expansions kept in info.json (and logged to MLflow) for a quick look


def stage_code() -> str:
    """Declared output version of the expansion stage (provenance.STAGE_VERSIONS)."""
    from medbench_core.provenance import stage_version

    return stage_version("expansion")


def expansion_identity(
    spec: ExpansionSpec,
    task: str,
    *,
    prompts_dir: str | Path | None = None,
    upstream_run_key: str | None = None,
    online: bool = False,
    revision: str | None = None,
    hub_cache: str | Path | None = None,
) -> dict[str, Any]:
    """What decides the expansion of ``task`` (without building it): for a file its sha256, for a
    generator its revision (``revision``, or the folder's hash computed here), the prompt
    template's text, decoding settings and, for LameR, the upstream run's key. Cheap enough for
    freshness checks (a folder hash, a file hash)."""
    if spec.source == "file":
        from medbench_core.retrieval.expansion.files import hub_identity, locate_file, task_folder
        from medbench_core.storage import sha256_file

        path = locate_file(spec, task, online=online, hub_cache=hub_cache)
        return file_identity(spec, file_sha256=sha256_file(path), task_folder=task_folder(spec, task), hub=hub_identity(spec, task, online, hub_cache))
    from medbench_core.retrieval.expansion.generate import cached_generator_revision

    revision = revision or cached_generator_revision(spec)
    return generation_identity(spec, revision=revision, prompt=prompt_text(spec, task, prompts_dir), upstream_run_key=upstream_run_key)


def expansion_fingerprint(
    spec: ExpansionSpec, tasks: list[str], *, upstream_version: str | None = None, prompts_dir: str | Path | None = None, online: bool = False
) -> dict[str, Any]:
    """What decides the expansion's texts on every task of ``tasks``, without building any: per
    task, :func:`expansion_identity` (a LameR upstream run's key stood for by ``upstream_version``,
    the upstream model's version), or why it cannot be read there (a missing file, a missing
    template). A model-level version (the registry's ``model_spec`` observations) hashes this, so
    a changed prompt template, seed, generator, published file or LameR upstream changes it."""
    from medbench_core.errors import MedbenchError

    revision = None
    if spec.source == "generate":
        from medbench_core.retrieval.expansion.generate import cached_generator_revision

        try:
            revision = cached_generator_revision(spec)
        except MedbenchError as exc:
            return {"unavailable": str(exc)}
    out: dict[str, Any] = {}
    upstream = upstream_version or ("upstream" if spec.upstream else None)
    for task in tasks:
        try:
            out[task] = expansion_identity(spec, task, prompts_dir=prompts_dir, upstream_run_key=upstream, online=online, revision=revision)
        except MedbenchError as exc:
            out[task] = {"unavailable": str(exc)}
    return out


def expansion_stage_key(spec: ExpansionSpec, task: Task, *, code: str | None = None, **kw: Any) -> str:
    """The folder name of the expansion of ``task`` (``Layout.expansion_dir``); ``kw`` as for :func:`expansion_identity`."""
    return expansion_key(task.content_hash(), expansion_identity(spec, task.name, **kw), code or stage_code())


def build_expansion(
    spec: ExpansionSpec,
    task: Task,
    *,
    prompts_dir: str | Path | None = None,
    upstream_run: pl.DataFrame | None = None,
    upstream_run_key: str | None = None,
    online: bool = False,
    generator=None,
    device: str = "cpu",
    progress: bool = False,
    code: str | None = None,
    hub_cache: str | Path | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Read or generate the expansion of every query of ``task``: ``(frame, info)``.

    ``hub_cache``: the hub cache a published hub expansion is read from (default huggingface_hub's).
    ``info`` holds the key and its identity, the token counts, seconds and tokens/s of a
    generation, a sample of expansions, and the query ids whose answer is empty (``empty_answers``,
    with a line in ``notes``). Bad published files raise :class:`~medbench_core.errors.DataError`
    before anything is returned.
    """
    if spec.source == "file":
        from medbench_core.retrieval.expansion.files import read_published

        frame, identity, info = read_published(spec, task, online=online, hub_cache=hub_cache)
    else:
        from medbench_core.retrieval.expansion.generate import generate_expansions

        template = prompt_text(spec, task.name, prompts_dir)
        frame, identity, info = generate_expansions(
            spec,
            task,
            template,
            upstream_run=upstream_run,
            upstream_run_key=upstream_run_key,
            generator=generator,
            online=online,
            device=device,
            progress=progress,
        )
        info["prompt_sha256"] = text_sha256(template)
    from medbench_core.retrieval.expansion.files import empty_answers, empty_note

    empty = empty_answers(frame)
    if empty:  # kept and scored with "" as R2MED scores them; counted and named here and in every expanded run's notes
        info["empty_answers"] = empty
        info["notes"] = [empty_note(empty, frame.height)]
    code = code or stage_code()
    info.update(
        expansion=spec.name,
        task=task.name,
        task_content_hash=task.content_hash(),
        key=expansion_key(task.content_hash(), identity, code),
        identity=identity,
        code=code,
        sample=[{"query_id": q, "answer": a[:1000]} for q, a in frame.select("query_id", "answer").head(SAMPLE).iter_rows()],
    )
    return frame, info
