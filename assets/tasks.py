"""Curated tasks: each source dataset read into the task data model and stored as Parquet."""


import dagster as dg

from medbench_core.provenance import code_version
from medbench_core.catalog import build_task
from medbench_core.model import TASK_FILES, save_task
from medbench_core.storage import is_complete, read_manifest, replace_dir_atomic, write_manifest
from orchestration.partitions import task_partitions
from orchestration.resources import ArtifactStoreResource, RegistryResource


@dg.asset(
    partitions_def=task_partitions,
    code_version=code_version("curated_task"),
    group_name="tasks",
    kinds={"polars", "parquet"},
    description="A source dataset curated into queries, corpus and graded qrels (Parquet), with licences on every record.",
)
def curated_task(context: dg.AssetExecutionContext, store: ArtifactStoreResource, registry: RegistryResource) -> dg.MaterializeResult:
    entry = registry.task_entry(context.partition_key)
    task = build_task(entry, store.shared_data, store.scratch_dir("sources", entry.name))
    folder = store.task_dir(entry.name)
    digest = task.content_hash()
    unchanged = is_complete(folder) and read_manifest(folder).get("content_hash") == digest
    if not unchanged:
        def build(tmp):
            names = save_task(task, tmp)
            write_manifest(tmp, names, {"content_hash": digest, "task": entry.name})

        # GATE.json belongs to the old content; the swap drops it and the checks write a new one.
        replace_dir_atomic(folder, build)
    licences = sorted(set(task.queries["licence"].to_list()) | set(task.corpus["licence"].to_list()))
    return dg.MaterializeResult(
        metadata={
            "content_hash": digest,
            "queries": task.queries.height,
            "documents": task.corpus.height,
            "judgments": task.qrels.height,
            "candidate_pairs": 0 if task.candidates is None else task.candidates.height,
            "licences": ", ".join(licences),
            "research_only": entry.research_only,
            "query_modality": task.meta.query_modality,
            "doc_modality": task.meta.doc_modality,
            "rewritten": not unchanged,
            "path": dg.MetadataValue.path(str(folder)),
        },
        data_version=dg.DataVersion(digest[:16]),
    )


__all__ = ["curated_task", "TASK_FILES"]
