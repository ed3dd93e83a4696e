"""The case-study psychiatry folder is spelled two ways in M3Retrieve's scripts ("Psychiatry and Behavioral Health"
in e5_large.py, get_medImageInsight_results.py, get_results_mteb_format_nvembed.py; "Psychiatry and Behavioral
Sciences" in mm_embed_new (1).py): a catalogue entry with either spelling reads the release's folder, whichever
it is; both folders present is refused."""

from __future__ import annotations

import shutil

import pytest
from reader_fixtures import DISCIPLINES, image_bytes, write_release

from medbench_core.errors import DataError
from medbench_core.taskdata.catalog import build_task, load_catalog

HEALTH, SCIENCES = "Psychiatry and Behavioral Health", "Psychiatry and Behavioral Sciences"


def release_with(tmp_path, folder: str):
    """The release fixture under Case_Study_Retrieval/, its Cardiology folder renamed to the psychiatry spelling ``folder``
    (the images beside its files: the archive's members keep the old name)."""
    root = write_release(tmp_path / "data" / "Case", disciplines_folder="Case_Study_Retrieval")
    shutil.move(root / "Case_Study_Retrieval" / "Cardiology", root / "Case_Study_Retrieval" / folder)
    for _, _, image in DISCIPLINES["Cardiology"]["queries"]:
        (root / "Case_Study_Retrieval" / folder / image).write_bytes(image_bytes(image))
    return root


def catalogue(tmp_path, subset: str):
    path = tmp_path / "tasks.yaml"
    path.write_text(f"tasks:\n  - {{name: case, reader: m3retrieve, path: Case, disciplines_folder: Case_Study_Retrieval, subsets: ['{subset}']}}\n")
    return load_catalog(path)


@pytest.mark.parametrize("folder, subset", [(SCIENCES, HEALTH), (HEALTH, SCIENCES), (HEALTH, HEALTH)])
def test_either_spelling_reads_the_folder_the_release_has(tmp_path, folder, subset):
    release_with(tmp_path, folder)
    catalog = catalogue(tmp_path, subset)
    name = catalog.names[0]
    task = build_task(catalog.task(name), tmp_path / "data", tmp_path / "work")
    want = DISCIPLINES["Cardiology"]
    assert sorted(task.queries["query_id"].to_list()) == sorted(q for q, _, _ in want["queries"])
    assert set(task.queries["discipline"]) == {subset}  # the catalogue's name labels the records
    for image in task.queries["image"].to_list():  # images found in the archive under the folder's own spelling
        assert task.resolve_image(image).is_file()


def test_both_spellings_present_is_refused(tmp_path):
    root = release_with(tmp_path, SCIENCES)
    shutil.copytree(root / "Case_Study_Retrieval" / SCIENCES, root / "Case_Study_Retrieval" / HEALTH)
    catalog = catalogue(tmp_path, HEALTH)
    with pytest.raises(DataError, match=rf"holds both '{HEALTH}' and '{SCIENCES}', the two spellings of one case-study folder"):
        build_task(catalog.task(catalog.names[0]), tmp_path / "data", tmp_path / "work")


def test_neither_is_named_with_both_spellings(tmp_path):
    release_with(tmp_path, "Neurology")
    catalog = catalogue(tmp_path, HEALTH)
    with pytest.raises(DataError, match=rf"discipline folder '{HEALTH}' \(or '{SCIENCES}'\) not found in .*Case_Study_Retrieval; it holds"):
        build_task(catalog.task(catalog.names[0]), tmp_path / "data", tmp_path / "work")
