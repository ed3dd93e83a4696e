"""docs/m3retrieve.md and docs/models_and_kinds.md: their models.yaml entries are valid registry entries as
written (each read by its kind, remote code trusted only for the listed ids), and the M3Retrieve
commands name the models the entries define and the tasks the data part's entry expands to."""

from __future__ import annotations

import re
from pathlib import Path

from medbench_core.retrieval.model_registry import load_registry
from medbench_core.taskdata.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]


def blocks(name: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", ROOT.joinpath("docs", name).read_text(), flags=re.DOTALL)


def test_m3retrieve_model_entries_load_with_their_kinds(tmp_path):
    (tmp_path / "models.yaml").write_text(blocks("m3retrieve.md", "yaml")[0])
    specs = {s.name: s for s in load_registry(tmp_path / "models.yaml")}
    assert {n: s.kind for n, s in specs.items()} == {
        "bm25": "bm25", "e5-large": "transformers", "bge-large-m3r": "transformers", "nv-embed-v2": "remote-code-embedder",
        "mmret-large": "remote-code-embedder", "clip-sf-large": "uniir-clip-sf", "mm-embed": "remote-code-embedder",
    }  # fmt: skip
    assert {n for n, s in specs.items() if s.trust_remote_code} == {"nv-embed-v2", "mmret-large", "mm-embed"}
    assert specs["clip-sf-large"].hub_id == "TIGER-Lab/UniIR" and specs["clip-sf-large"].settings.architecture == "ViT-L-14-quickgelu"
    mm = specs["mm-embed"].settings.calls()
    assert set(mm) == {"text", "image", "image_text"} and mm["image_text"].records == {"arg": 0, "text": "txt", "image": "img"}
    assert set(specs["nv-embed-v2"].settings.calls()) == {"text"}  # text-only: it reads the captions
    # The command line names these models and the four tasks of the data part's entry.
    command = next(b for b in blocks("m3retrieve.md", "bash") if "medbench run" in b)
    models = re.search(r"--models (\S+)", command).group(1).split(",")
    assert set(models) == set(specs)
    data = ROOT.joinpath("docs", "tasks_and_readers.md").read_text()
    entry = next(b for b in re.findall(r"```yaml\n(.*?)```", data, flags=re.DOTALL) if "dataset: Tensorists/M3Retrieve" in b)
    (tmp_path / "tasks.yaml").write_text("tasks:\n" + entry)
    tasks = re.search(r"--tasks (\S+)", command).group(1).split(",")
    assert tasks == load_catalog(tmp_path / "tasks.yaml").names


def test_models_and_kinds_examples_load(tmp_path):
    names = {}
    for body in blocks("models_and_kinds.md", "yaml"):
        if "models:" not in body:
            body = "models:\n" + body
        (tmp_path / "models.yaml").write_text(body)
        names.update({s.name: s for s in load_registry(tmp_path / "models.yaml")})
    assert names["clip-sf"].kind == "uniir-clip-sf" and names["biomedclip"].hub_id == "microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"
    assert {n: s.trust_remote_code for n, s in names.items() if s.kind == "remote-code-embedder"} == {"gme-2b": True, "jina-clip-v1": True, "pubmedclip": False}
