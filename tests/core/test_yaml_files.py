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


def test_a_file_read_again_is_parsed_once_and_each_reader_gets_its_own_copy(tmp_path, monkeypatch):
    """One `medbench run` reads models.yaml and tasks.yaml about 30 times (issue 52): the same bytes are parsed once;
    a caller changing what it got changes nothing for the next; new bytes of the same size are parsed again."""
    from medbench_core import yaml_file

    parsed: list[str] = []
    real = yaml_file.load_yaml
    monkeypatch.setattr(yaml_file, "load_yaml", lambda text, where: parsed.append(text) or real(text, where))
    f = tmp_path / "models.yaml"
    f.write_text("baseline: bm25\nmodels: [{name: bm25, kind: bm25}]\n")
    first = yaml_file.read_yaml_mapping(f, "model registry")
    first["models"][0]["name"] = "changed"
    second = yaml_file.read_yaml_mapping(f, "model registry")
    assert second == {"baseline": "bm25", "models": [{"name": "bm25", "kind": "bm25"}]} and len(parsed) == 1
    f.write_text("baseline: bm26\nmodels: [{name: bm26, kind: bm25}]\n")  # the same size, other bytes
    assert yaml_file.read_yaml_mapping(f, "model registry")["baseline"] == "bm26" and len(parsed) == 2
    f.write_text("models: [bm25\n")  # an invalid file is refused every time it is read
    for _ in range(2):
        with pytest.raises(DataError, match="not valid YAML"):
            yaml_file.read_yaml_mapping(f, "model registry")
    assert len(parsed) == 4
