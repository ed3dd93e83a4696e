"""The contamination audit per task (issue 49): could a model have seen the test?

``contamination_audit`` compares one task's queries and documents with every other curated task of
the benchmark and with every training manifest a model declares in models.yaml: near-duplicate
texts by MinHash LSH, images by perceptual hashes (medbench_core.evaluation.contamination). Stored
under ``Layout.audit_dir`` at a key over every input's content (:func:`audit_key`), so it is
recomputed only when a task, a manifest or the thresholds change, and then put together from its per-source pieces
(``Layout.audit_piece_dir``): only the pieces whose inputs changed are computed, a task's against a new task taken
from the new task's with its sides swapped. The leaderboard reads it to mark
each cell trained-on-task, zero-shot or unknown and to score it without the contaminated queries.
"""

import dagster as dg

from medbench_core.errors import MedbenchError
from medbench_core.evaluation.contamination.audit import audit_key, compose_audit, load_audit, store_audit
from medbench_core.evaluation.contamination.board import admitted, audit_inputs, task_splits
from medbench_core.provenance import stage_version
from medbench_core.storage import is_complete

CONTAMINATION_AUDIT = "contamination_audit"


def curated_tasks(store, names: list[str]) -> dict:
    """Every task of ``names`` that is curated, verifies and passes its gates (any other is left out of the comparison)."""
    out = {}
    for n in names:
        try:
            out[n] = store.load_task(n)
        except MedbenchError:
            continue
    return admitted(store.layout, out)


def audit(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    r = context.resources
    name = context.partition_key
    catalog = r.registry.catalog()
    tasks = curated_tasks(r.store, catalog.names)
    task = tasks.get(name) or r.store.load_task(name)  # not curated: fails naming the task
    specs = r.registry.models()
    others, manifests = audit_inputs(task, tasks, specs)
    key = audit_key(task, others, manifests)
    folder = r.store.layout.audit_dir(name, key)
    hit = is_complete(folder)
    pieces: dict[str, list[str]] = {}
    if not hit:
        # From the stored per-source pieces: a task added to the benchmark is compared with each other task once (issue 51).
        pairs, info, pieces = compose_audit(task, others, manifests, splits=task_splits(catalog.tasks), piece_dir=r.store.layout.audit_piece_dir)
        store_audit(folder, pairs, info, task, others, {"provenance": {"task": name, "provenance_key": key, "code_version": stage_version("contamination")}})
    pairs, info = load_audit(folder)
    by_source = {s: n for s, n in pairs.group_by("source").len().sort("source").iter_rows()} if pairs.height else {}
    return dg.MaterializeResult(
        metadata={
            "task": name,
            "key": key,
            "cache_hit": hit,
            "pairs": pairs.height,
            "pairs_by_source": dg.MetadataValue.json(by_source),
            "compared_with": dg.MetadataValue.json({"tasks": [o.name for o in others], "manifests": [p for _, p in manifests]}),
            "seconds": info.get("seconds"),
            "pieces": dg.MetadataValue.json({k: len(v) for k, v in pieces.items()}),
            "path": dg.MetadataValue.path(str(folder)),
        },
        data_version=dg.DataVersion(key),
    )


def build_contamination_audit(partitions) -> dg.AssetsDefinition:
    """The ``contamination_audit`` asset over the task partitions; it reads every curated task."""
    return dg.asset(
        name=CONTAMINATION_AUDIT,
        partitions_def=partitions.tasks,
        deps=[dg.AssetDep("curated_task", partition_mapping=dg.AllPartitionMapping())],
        code_version=stage_version("contamination"),
        group_name="evaluation",
        kinds={"parquet"},
        description="Near-duplicate texts (MinHash LSH) and images (pHash + dHash) of a task in every other task and in the declared "
        "training manifests: the evidence behind each cell's trained-on-task / zero-shot / unknown mark and its decontaminated score.",
        required_resource_keys={"store", "registry"},
    )(audit)
