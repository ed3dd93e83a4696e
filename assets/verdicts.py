"""What a recorded gate verdict must have judged to be reused (issue 53): the per-task and the cross-task keys.

Apart from assets.checks, which records the verdicts, so that assets.tasks can ask whether a curated task is
current without importing the checks (and the checks import the task asset's name).
"""

from collections.abc import Iterable

from medbench_core.provenance import artifact_key, stage_version


def task_judged_with(catalog, entry, content_hash: str) -> str:
    """What a task's recorded verdict must have judged to be reused: its content and the rules (the allowlist, its
    research-only flag, what its qrels holes get, the contracts' code version)."""
    holes = str(entry.options.get("qrels_holes") or "refuse")
    rules = artifact_key(allow=sorted(catalog.licence_allowlist), research_only=entry.research_only, qrels_holes=holes, code=stage_version("contracts"))
    return f"{content_hash}:{rules}"


def overlap_judged_with(tasks: Iterable[tuple[str, str]], test_image_duplicates: str = "ignore") -> str:
    """What the cross-task verdict must have judged to be reused: exactly these (task, content hash), the contracts' code
    version and tasks.yaml's ``test_image_duplicates`` (mark or refuse add the image check; ignore keeps the key it had before it)."""
    asked = {"test_image_duplicates": test_image_duplicates} if test_image_duplicates != "ignore" else {}
    return artifact_key(tasks=sorted(tasks), code=stage_version("contracts"), **asked)
