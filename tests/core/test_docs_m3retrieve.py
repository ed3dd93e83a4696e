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


def code_folders(root: Path, monkeypatch) -> dict[str, str]:
    """The folders the code-folder entries name, written under ``root`` (the adapters as the page gives them, stubs for
    the downloaded code) and the two packages they import on sys.path; their paths as written -> code hashes."""
    from medbench_core.retrieval.kinds.code_folder import code_hash, code_root

    adapters = {b.split("\n", 1)[0].split(":", 1)[0].lstrip("# "): b for b in blocks("m3retrieve.md", "python")}
    files = {
        "MedImageInsights/medimageinsightmodel.py": "class MedImageInsight:\n    pass\n",
        "UniIR/src/blipff_adapter.py": adapters["UniIR/src/blipff_adapter.py"],
        "preflmr/preflmr_adapter.py": adapters["preflmr/preflmr_adapter.py"],
        "site/fairscale/__init__.py": "",
        "site/flmr/__init__.py": "",
        "site/colbert/__init__.py": "",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root / "site"))
    return {p: code_hash(code_root(p)) for p in ("./MedImageInsights", "./UniIR/src", "pkg:fairscale", "./preflmr", "pkg:flmr", "pkg:colbert")}


def test_m3retrieve_model_entries_load_with_their_kinds(tmp_path, monkeypatch):
    import ast

    from medbench_core.retrieval.kinds.code_folder import TrustedCode

    hashes = code_folders(tmp_path, monkeypatch)
    body = blocks("m3retrieve.md", "yaml")[0]
    for path, digest in hashes.items():  # the page leaves the hashes for the first run to print; here they are known
        body = body.replace(f'{{path: {path}, sha256: "{"0" * 64}"}}', f"{{path: {path}, sha256: {digest}}}")
        body = body.replace(f'{{path: "{path}", sha256: "{"0" * 64}"}}', f'{{path: "{path}", sha256: {digest}}}')
    assert "0" * 64 not in body
    (tmp_path / "models.yaml").write_text(body)
    specs = {s.name: s for s in load_registry(tmp_path / "models.yaml")}
    assert {n: s.kind for n, s in specs.items()} == {
        "bm25": "bm25", "e5-large": "transformers", "e5-large-v1": "transformers", "bge-large-en-e5": "transformers",
        "bge-large-m3r": "transformers", "nv-embed-v2": "remote-code-embedder", "mmret-large": "remote-code-embedder",
        "mii": "code-folder", "clip-sf-large": "uniir-clip-sf", "blip-ff-large": "code-folder", "mm-embed": "remote-code-embedder",
        "preflmr": "code-folder-late", "preflmr-vit-l": "code-folder-late",
    }  # fmt: skip
    assert {n for n, s in specs.items() if s.trust_remote_code} == {"nv-embed-v2", "mmret-large", "mm-embed"}
    assert specs["clip-sf-large"].hub_id == "TIGER-Lab/UniIR" and specs["clip-sf-large"].settings.architecture == "ViT-L-14-quickgelu"
    mm = specs["mm-embed"].settings.calls()
    assert set(mm) == {"text", "image", "image_text"} and mm["image_text"].records == {"arg": 0, "text": "txt", "image": "img"}
    assert set(specs["nv-embed-v2"].settings.calls()) == {"text"}  # text-only: it reads the captions
    # The three code folders: trusted by hash, the imports too; PreFLMR searched through PLAID with nbits 8 and run_flmr.py's prefix.
    names = ("mii", "blip-ff-large", "preflmr", "preflmr-vit-l")
    trusted = {n: [p for p, _, _ in specs[n].block.folders] for n in names if isinstance(specs[n].block, TrustedCode)}
    flmr_code = ["./preflmr", "pkg:flmr", "pkg:colbert"]
    assert trusted == {"mii": ["./MedImageInsights"], "blip-ff-large": ["./UniIR/src", "pkg:fairscale"], "preflmr": flmr_code, "preflmr-vit-l": flmr_code}
    # FLMR's searcher (flmr.search_custom_collection: ColBERT's, zero query vectors removed), the default of both readings
    for n in ("preflmr", "preflmr-vit-l"):
        assert specs[n].index == {"type": "plaid", "nbits": 8, "searcher": "colbertv2", "remove_zero_query_tokens": True}
    assert specs["preflmr-vit-l"].settings.init["checkpoint"] == "LinWeizheDragon/PreFLMR_ViT-L"
    assert specs["preflmr"].settings.instructions == {"default": "Retrieve the most relevant text to the given image and image caption: "}
    assert specs["mii"].settings.calls()["image_text"].output == ["text_embeddings", "image_embeddings"]
    # The E5 / BGE readings differ in the model and pooling only.
    readings = {
        n: (specs[n].path, specs[n].settings.pooling, specs[n].settings.query_prefix) for n in ("e5-large", "e5-large-v1", "bge-large-en-e5", "bge-large-m3r")
    }
    assert readings == {"e5-large": ("intfloat/e5-large-v2", "mean", "query:"), "e5-large-v1": ("intfloat/e5-large", "mean", "query:"),
                        "bge-large-en-e5": ("BAAI/bge-large-en", "mean", "query:"), "bge-large-m3r": ("BAAI/bge-large-en-v1.5", "cls", "")}  # fmt: skip
    for code in blocks("m3retrieve.md", "python"):
        ast.parse(code)  # the adapters are Python
    # The command line names these models and the four tasks of the data part's entry.
    command = next(b for b in blocks("m3retrieve.md", "bash") if "medbench run" in b)
    models = re.search(r"--models (\S+)", command).group(1).split(",")
    assert set(models) == set(specs)
    data = ROOT.joinpath("docs", "tasks_and_readers.md").read_text()
    entry = next(b for b in re.findall(r"```yaml\n(.*?)```", data, flags=re.DOTALL) if "dataset: Tensorists/M3Retrieve" in b)
    (tmp_path / "tasks.yaml").write_text("tasks:\n" + entry)
    tasks = re.search(r"--tasks (\S+)", command).group(1).split(",")
    assert tasks == load_catalog(tmp_path / "tasks.yaml").names


def test_the_summary_entry_reads_the_scripts_folder(tmp_path):
    from reader_fixtures import DISCIPLINES, image_bytes, write_release

    entry = next(
        b for b in re.findall(r"```text\n(.*?)```", ROOT.joinpath("docs", "m3retrieve.md").read_text(), flags=re.DOTALL) if "M3Retrieve_SummaryRetrieval" in b
    )
    (tmp_path / "tasks.yaml").write_text("licence_allowlist: [CC-BY-SA-4.0]\ntasks:\n" + entry)
    catalog = load_catalog(tmp_path / "tasks.yaml")
    assert catalog.names == ["m3retrieve_summary_mmqsd_ret"]
    # The scripts' one MTEB folder, as a local copy of the hub snapshot would hold it.
    release = write_release(tmp_path / "release")
    (release / "Cardiology").rename(release / "MMQSD_Ret")
    for _, _, image in DISCIPLINES["Cardiology"]["queries"]:
        (release / "MMQSD_Ret" / image).write_bytes(image_bytes(image))
    from medbench_core.taskdata.readers import ReadContext
    from medbench_core.taskdata.readers.m3retrieve import M3RetrieveOptions, read_m3retrieve

    task = read_m3retrieve(release, M3RetrieveOptions(name="summary", subset="MMQSD_Ret"), ReadContext(scratch=tmp_path / "scratch"))
    assert task.queries.height == 3 and task.corpus.height == 6


def test_models_and_kinds_examples_load(tmp_path):
    names = {}
    for body in blocks("models_and_kinds.md", "yaml"):
        if "models:" not in body:
            body = "models:\n" + body
        (tmp_path / "models.yaml").write_text(body)
        names.update({s.name: s for s in load_registry(tmp_path / "models.yaml")})
    assert names["clip-sf"].kind == "uniir-clip-sf" and names["biomedclip"].hub_id == "microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"
    assert {n: s.trust_remote_code for n, s in names.items() if s.kind == "remote-code-embedder"} == {"gme-2b": True, "jina-clip-v1": True, "pubmedclip": False}
