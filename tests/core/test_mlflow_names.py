"""One rule for the names the product logs to MLflow (medbench_core/evaluation/mlflow_names.py, issue 50 item 3)."""

import re
from pathlib import Path

from medbench_core.evaluation.mlflow_names import KEY_CHARS, PARAM_CHARS, PART_CHARS, mlflow_name

ROOT = Path(__file__).resolve().parents[2]


def test_a_key_a_part_of_a_key_and_a_param_name():
    assert mlflow_name("scifact/bm25+rm3") == "scifact/bm25_rm3"
    assert mlflow_name("scifact/BAAI/bge-m3@main", KEY_CHARS) == "scifact/BAAI/bge-m3_main"
    assert mlflow_name("BAAI/bge-m3 v1.5", PART_CHARS) == "BAAI_bge-m3_v1.5"
    assert mlflow_name("bm25+rm3 a:b/c", PARAM_CHARS) == "bm25_rm3 a:b/c"
    assert mlflow_name("héllo_北京٣") == "héllo_北京٣"  # letters and digits of any script are kept, as MLflow's \w does
    assert mlflow_name(0.5, PART_CHARS) == "0.5"


def test_param_names_are_mlflows_own_rule_on_every_code_point():
    # MLflow's rule for metric and param names (mlflow.utils.validation): ^[/\w.\- :]*$
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert mlflow_name(text, PARAM_CHARS) == re.sub(r"[^/\w.\- :]", "_", text)
    assert re.fullmatch(r"[/\w.\-]*", mlflow_name(text))


def test_no_other_copy_of_the_rule_in_the_product():
    copies = [
        str(p.relative_to(ROOT))
        for folder in ("medbench_core", "assets", "runtime", "orchestration", "medbench_cli", "medbench_release")
        for p in (ROOT / folder).rglob("*.py")
        if re.search(r"isalnum\(\) or \w+ in", p.read_text())
    ]
    # plots.file_name makes file names (a "/" becomes "__"), not MLflow names
    assert sorted(copies) == ["medbench_core/evaluation/mlflow_names.py", "medbench_core/evaluation/plots.py"]
