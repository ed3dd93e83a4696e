"""tasks.yaml and models.yaml that cannot be read are refused naming the file (medbench_core/yaml_file.py)."""

from __future__ import annotations

import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.spec import load_expansions
from medbench_core.retrieval.model_registry import load_baseline, load_registry
from medbench_core.taskdata.catalog import load_catalog


@pytest.mark.parametrize("load", [load_catalog, load_registry, load_expansions, load_baseline])
def test_a_missing_file_invalid_yaml_or_a_top_level_list_is_refused_naming_the_file(tmp_path, load):
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(DataError, match=rf"^{missing}: (task catalogue|model registry) not found$"):
        load(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("models: [bm25\n")
    with pytest.raises(DataError) as err:
        load(broken)
    # one line, naming the file and the line the parser stopped at (the flow sequence opened on line 1 never closes)
    assert str(err.value) == f"{broken}:2: not valid YAML: expected ',' or ']', but got '<stream end>' at column 1 (while parsing a flow sequence at line 1)"
    listed = tmp_path / "listed.yaml"
    listed.write_text("- name: bm25\n  kind: bm25\n")
    with pytest.raises(DataError, match=rf"^{listed}: expected a mapping at the top level .*found list$"):
        load(listed)


def test_an_empty_registry_file_has_no_expansions_and_no_models_list(tmp_path):
    empty = tmp_path / "models.yaml"
    empty.write_text("")
    assert load_expansions(empty) == []
    with pytest.raises(DataError, match=rf"^{empty}: expected a top-level 'models:' list$"):
        load_registry(empty)
