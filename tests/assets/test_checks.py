"""The data-contract asset checks on curated_task, run through Dagster on tiny BEIR folders.

A failed gate must hold in a later, separate run: the check records GATE.json and the
downstream precondition (Layout.require_gate, which every stage asset asks) refuses the task.
"""

import json
from pathlib import Path

import dagster as dg
import pytest

from assets.checks import OVERLAP_CHECK, TASK_CHECK
from medbench_core.errors import ContractError
from medbench_core.taskdata.contracts import gate_refusal, overlap_gate_path
from runtime.resources import ArtifactStoreResource, RegistryResource
from tests.assets.project import PARTITIONS, curated_task, task_checks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def write_beir(folder: Path, queries: dict, docs: dict, qrels: list) -> None:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels))


@pytest.fixture
def world(tmp_path):
    # Partition keys come from the real tasks.yaml; the entries behind them from a test catalogue.
    assert {"scifact", "liveqa_medquad"} <= set(PARTITIONS.tasks.get_partition_keys())
    shared = tmp_path / "shared"
    write_beir(shared / "sci", {"1": "Aspirin reduces fever."}, {"d1": "aspirin trial", "d2": "other"}, [("1", "d1", 1)])
    write_beir(shared / "lq", {"1": "ASPIRIN reduces fever", "2": "what is gout?"}, {"a1": "gout", "a2": "asp"}, [("1", "a2", 1), ("2", "a1", 1)])
    tasks_yaml = tmp_path / "tasks.yaml"

    def catalogue(lq_research_only: bool) -> None:
        tasks_yaml.write_text(
            "licence_allowlist: [CC-BY-4.0, ODC-By-1.0]\n"
            "tasks:\n"
            "  - {name: scifact, reader: beir, path: sci, split: test, query_licence: CC-BY-4.0, doc_licence: ODC-By-1.0}\n"
            f"  - {{name: liveqa_medquad, reader: beir, path: lq, split: test, query_licence: unknown, doc_licence: CC-BY-4.0, research_only: {str(lq_research_only).lower()}}}\n"
        )

    catalogue(False)
    resources = {
        "store": ArtifactStoreResource(root=str(tmp_path / "data"), shared_data=str(shared), scratch=str(tmp_path / "scratch")),
        "registry": RegistryResource(models_file=str(ROOT / "models.yaml"), tasks_file=str(tasks_yaml)),
    }
    return resources, catalogue, shared


def run(resources, key):
    result = dg.materialize([curated_task, *task_checks], partition_key=key, resources=resources, raise_on_error=False)
    return result, {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_gates_block_in_the_run_and_in_later_runs(world):
    resources, catalogue, shared = world
    store = resources["store"]

    result, checks = run(resources, "scifact")
    assert result.success
    assert checks[TASK_CHECK].passed and checks[OVERLAP_CHECK].passed
    md = checks[TASK_CHECK].metadata
    assert Path(md["gx_results"].value).is_file() and md["data_docs"].value.startswith("file://")
    assert md["content_hash"].value == store.load_task("scifact").content_hash()
    assert checks[OVERLAP_CHECK].metadata["not_judged"].value == "liveqa_medquad"
    store.layout.require_gate("scifact", store.load_task("scifact").content_hash())

    # liveqa_medquad: unknown query licence, not research-only -> its own gate fails; and its
    # query 1 equals scifact's after normalisation -> the overlap gate fails for both.
    result, checks = run(resources, "liveqa_medquad")
    assert not result.success
    assert not checks[TASK_CHECK].passed
    assert checks[TASK_CHECK].metadata["failing_rows"].value == {"queries.parquet": ["1", "2"]}
    assert not checks[OVERLAP_CHECK].passed
    assert checks[OVERLAP_CHECK].metadata["failed_tasks"].value == "liveqa_medquad, scifact"
    gate = json.loads((store.task_dir("liveqa_medquad") / "GATE.json").read_text())
    assert gate["passed"] is False and "'unknown' (1, 2)" in gate["message"]

    # A separate, later step on liveqa is refused by the recorded verdict.
    lq = store.load_task("liveqa_medquad")
    with pytest.raises(ContractError, match="data contract failed"):
        store.layout.require_gate("liveqa_medquad", lq.content_hash())
    over = overlap_gate_path(store.root_path / "tasks")
    assert "cross-task overlap check failed" in gate_refusal(store.task_dir("scifact"), store.load_task("scifact").content_hash(), overlap_gate=over)

    # Marked research-only and de-duplicated: both gates pass again.
    catalogue(True)
    (shared / "lq" / "queries.jsonl").write_text(
        json.dumps({"_id": "1", "text": "Is ibuprofen safe?"}) + "\n" + json.dumps({"_id": "2", "text": "what is gout?"}) + "\n"
    )
    result, checks = run(resources, "liveqa_medquad")
    assert result.success, checks[TASK_CHECK].metadata["message"].value
    assert checks[TASK_CHECK].metadata["research_only"].value is True
    lq = store.load_task("liveqa_medquad")
    store.layout.require_gate("liveqa_medquad", lq.content_hash())
    assert gate_refusal(store.task_dir("liveqa_medquad"), lq.content_hash(), overlap_gate=over) is None


def test_gate_judged_other_content_is_refused(world):
    resources, _, shared = world
    store = resources["store"]
    assert run(resources, "scifact")[0].success
    old = store.load_task("scifact")
    gate = json.loads((store.task_dir("scifact") / "GATE.json").read_text())
    gate["content_hash"] = "0" * 64  # the gate judged some other version of the task
    (store.task_dir("scifact") / "GATE.json").write_text(json.dumps(gate))
    with pytest.raises(ContractError, match="re-run the checks"):
        store.layout.require_gate("scifact", old.content_hash())
