"""The "Evaluate R2MED" entries of docs/r2med.md are valid catalogue and registry entries, as written."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from medbench_core.retrieval.model_registry import load_registry
from medbench_core.taskdata.catalog import load_catalog
from tests.core.test_mteb_tasks import R2MED_PINS as PINS  # mteb 2.26.24's pins, checked against mteb there

ROOT = Path(__file__).resolve().parents[2]
R2MED = ["biology", "bioinformatics", "medical_sciences", "medxpertqa_exam", "medqa_diag", "pmc_treatment", "pmc_clinical", "iiyi_clinical"]
DATASETS = dict(
    zip(R2MED, ["Biology", "Bioinformatics", "Medical-Sciences", "MedXpertQA-Exam", "MedQA-Diag", "PMC-Treatment", "PMC-Clinical", "IIYi-Clinical"])
)


def yaml_blocks() -> list[str]:
    text = ROOT.joinpath("docs", "r2med.md").read_text()
    section = text[text.index("## Evaluate R2MED (or any MTEB-format dataset)") :]
    return re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)


@pytest.mark.slow  # imports mteb
def test_readme_task_entries_expand_to_the_eight_r2med_tasks(tmp_path):
    one, bench, local = yaml_blocks()[:3]
    (tmp_path / "tasks.yaml").write_text("tasks:\n" + one)
    (bio,) = load_catalog(tmp_path / "tasks.yaml").tasks  # no other field: name, dataset and revision from mteb
    assert (bio.name, bio.options["dataset"], bio.options["revision"]) == ("r2med_biology", "R2MED/Biology", "8b9fec2db9eda4b5742d03732213fbaee8169556")
    for body in (bench, local):
        (tmp_path / "tasks.yaml").write_text("tasks:\n" + body)
        catalog = load_catalog(tmp_path / "tasks.yaml")
        assert catalog.names == [f"r2med_{t}" for t in R2MED]
    assert all(t.research_only for t in catalog.tasks)  # the local folders: no licence anywhere
    (tmp_path / "tasks.yaml").write_text("tasks:\n" + bench)
    assert load_catalog(tmp_path / "tasks.yaml").task("r2med_biology").options == {**bio.options}


def test_readme_model_entries_load(tmp_path):
    (tmp_path / "models.yaml").write_text(yaml_blocks()[3])
    specs = {m.name: m for m in load_registry(tmp_path / "models.yaml")}
    assert (specs["r2med-bm25"].kind, dataclasses.asdict(specs["r2med-bm25"].settings)) == ("lucene-bm25", {"k1": 0.9, "b": 0.4})
    assert specs["bge-large-en-v1.5"].hub_id == "BAAI/bge-large-en-v1.5"
    assert specs["bge-large-en-v1.5-chunked"].settings.long_text == "chunk"


def test_readme_hub_expansion_entry_reads_each_task_from_its_own_dataset_at_the_tasks_revision(tmp_path):
    from medbench_core.retrieval.expansion.files import hub_location, relative_file
    from medbench_core.retrieval.expansion.spec import load_expansions

    (block,) = [b for b in yaml_blocks() if "hub:R2MED/{task}" in b]
    (tmp_path / "models.yaml").write_text(block)
    (spec,) = load_expansions(tmp_path / "models.yaml")
    for t in R2MED:
        # Each task's own hub dataset at the commit MTEB pins for its data.
        assert hub_location(spec, f"r2med_{t}") == (f"R2MED/{DATASETS[t]}", PINS[f"r2med_{t}"])
        assert relative_file(spec, f"r2med_{t}") == "hyde/qwq-32b/query_with_hydoc.jsonl"
    assert spec.reasoning_rule() == "think"
