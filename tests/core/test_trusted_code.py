"""Allowlisted code runs as exactly the allowlisted bytes, and what it loads from outside its folder is pinned (issue 44, items 1-2).

Each case writes a tiny code folder (a class ``Tiny`` in ``tiny.py`` that imports ``helper.py``), lists it
under ``trust_code`` by its hash, then loads and calls the model in a fresh Python process (a process
of its own: Python caches imported modules, and bytecode is what the attack plants). Planted code
writes a marker file when it runs; every case checks the marker is absent and the process refused
with one line naming the file, or ran the allowlisted source and gave its vectors.

Faults (RELIABILITY.md, "Python's import system"): a ``__pycache__`` .pyc whose header matches its
source's mtime and size runs instead of the source; a sourceless .pyc imports; ``rglob`` does not enter
a symlinked folder; a module of the folder's name imported earlier shadows the folder's; a pickle in
the folder can run code when loaded; weights outside the folder were neither hashed nor pinned.
"""

from __future__ import annotations

import importlib._bootstrap_external as bootstrap
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.code_folder import code_hash

PROJECT = Path(__file__).resolve().parents[2]
TINY = """
import numpy as np
from helper import scale


class Tiny:
    def __init__(self, weights=None):
        self.w = np.load(weights) if weights else np.ones(3, dtype=np.float32)

    def encode(self, texts=None):
        return np.array([[len(t) * scale(), float(t.count(" ")) + 1.0, 1.0] for t in texts], dtype=np.float32) * self.w
"""
HELPER = "def scale():\n    return 2.0\n"
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\ndef scale():\n    return 100.0\n"
SETTINGS = {"entry": "tiny:Tiny", "text": {"method": "encode", "texts": "texts"}, "normalize": False}
TEXTS = ["ab cd", "efg"]
SOURCE_VECTORS = [[10.0, 2.0, 1.0], [6.0, 1.0, 1.0]]  # len * 2 (helper.scale), words, 1

CHILD = """
import json, sys
from medbench_core.retrieval.model_registry import load_registry
spec = load_registry(sys.argv[1])[0]
print(json.dumps({"revision": spec.plugin.revision(spec)}), flush=True)
if sys.argv[2:] == ["preimport"]:
    sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0] + "/elsewhere")
    import helper  # a module of the folder's name, imported first from somewhere else
model = spec.plugin.load(spec)
vectors = model.encode_records(%r, [None, None], ["en", "en"], "passage")
print(json.dumps({"vectors": vectors.tolist()}))
""" % (TEXTS,)


def write_folder(folder: Path, helper: str = HELPER) -> Path:
    folder.mkdir(parents=True)
    (folder / "tiny.py").write_text(TINY)
    (folder / "helper.py").write_text(helper)
    return folder


def registry(tmp: Path, folder: Path, sha256: str | None = None, **settings) -> Path:
    path = tmp / "models.yaml"
    entry = {"name": "tiny", "kind": "code-folder", "path": str(folder), "settings": {**SETTINGS, **settings}}
    path.write_text(json.dumps({"trust_code": [{"path": str(folder), "sha256": sha256 or code_hash(folder)}], "models": [entry]}))
    return path


def run_child(models: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(PROJECT), **(env or {})}
    return subprocess.run([sys.executable, "-c", CHILD, str(models), *extra], cwd=models.parent, env=full, capture_output=True, text=True, timeout=300)


def outputs(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict = {}
    for line in proc.stdout.splitlines():
        out.update(json.loads(line))
    return out


def refusal(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def plant_bytecode(source: Path, code_text: str) -> Path:
    """The .pyc Python 3.11 runs instead of ``source``: ``code_text`` compiled, under a header with the source's mtime and size."""
    st = source.stat()
    code = compile(code_text, str(source), "exec")
    pyc = Path(bootstrap.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(bootstrap._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
    return pyc


def test_bytecode_planted_after_allowlisting_changes_the_hash_and_never_runs(tmp_path):
    folder = write_folder(tmp_path / "code")
    models = registry(tmp_path, folder)
    marker = tmp_path / "planted-ran"
    plant_bytecode(folder / "helper.py", EVIL.format(marker=str(marker)))

    proc = run_child(models)

    assert f"the code in {folder} changed since trust_code listed it" in refusal(proc)
    assert not marker.exists()


def test_bytecode_present_when_allowlisted_is_hashed_but_the_source_is_what_runs(tmp_path):
    folder = write_folder(tmp_path / "code")
    marker = tmp_path / "planted-ran"
    pyc = plant_bytecode(folder / "helper.py", EVIL.format(marker=str(marker)))
    models = registry(tmp_path, folder)  # the reviewer read helper.py; the .pyc beside it is in the hash

    got = outputs(run_child(models))

    assert got["vectors"] == SOURCE_VECTORS  # helper.scale() of the source (2.0), not the bytecode's 100.0
    assert not marker.exists()
    assert pyc.read_bytes()[16:] and not list(folder.glob("__pycache__/tiny.*.pyc"))  # and nothing new was written there
    pyc.unlink()
    with pytest.raises(DataError, match="changed since trust_code listed it"):
        from medbench_core.retrieval.model_registry import load_registry

        load_registry(models)  # removing the bytecode changes the hash too: it is part of what was allowlisted


def test_a_sourceless_module_is_refused_naming_it(tmp_path):
    folder = write_folder(tmp_path / "code")
    marker = tmp_path / "planted-ran"
    code = compile(EVIL.format(marker=str(marker)), "helper.py", "exec")
    (folder / "helper.pyc").write_bytes(bootstrap._code_to_timestamp_pyc(code, 0, 0))
    (folder / "helper.py").unlink()

    with pytest.raises(DataError, match=r"helper\.pyc is bytecode without its source"):
        code_hash(folder)
    models = tmp_path / "models.yaml"
    models.write_text(json.dumps({"trust_code": [], "models": [{"name": "tiny", "kind": "code-folder", "path": str(folder), "settings": SETTINGS}]}))
    assert "helper.pyc is bytecode without its source" in refusal(run_child(models))
    assert not marker.exists()


def test_a_link_leaving_the_folder_is_refused_and_a_linked_subpackage_inside_is_hashed(tmp_path):
    outside = write_folder(tmp_path / "outside")
    folder = write_folder(tmp_path / "code")
    (folder / "vendored").symlink_to(outside)
    with pytest.raises(DataError, match=rf"vendored is a link to {outside}, outside the folder"):
        code_hash(folder)
    (folder / "vendored").unlink()

    # A subpackage inside the folder, reached through a link (Path.rglob does not enter it), edited after allowlisting.
    hidden = folder / ".src" / "extra"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("VALUE = 1\n")
    (folder / "extra").symlink_to(Path(".src") / "extra")
    before = code_hash(folder)
    (hidden / "__init__.py").write_text("VALUE = 2\n")
    assert code_hash(folder) != before
    (folder / "extra").unlink()
    (folder / "extra").symlink_to(folder / ".src")  # the same place, another target: another hash
    assert code_hash(folder) != before


def test_pickled_weights_in_the_folder_are_refused(tmp_path):
    folder = write_folder(tmp_path / "code")
    (folder / "weights.bin").write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    with pytest.raises(DataError, match=r"weights.bin is a pickle \(loading it can execute code; medbench never loads pickles\)"):
        code_hash(folder)
    (folder / "weights.bin").unlink()
    np.save(folder / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"objects.npy is a pickle"):
        code_hash(folder)
    (folder / "objects.npy").unlink()
    np.save(folder / "plain.npy", np.ones(3, dtype=np.float32))
    assert code_hash(folder)  # plain arrays are weights like any other file: hashed


def test_weights_in_the_folder_are_part_of_the_trust_hash(tmp_path):
    folder = write_folder(tmp_path / "code")
    np.save(folder / "w.npy", np.array([1.0, 1.0, 1.0], dtype=np.float32))
    models = registry(tmp_path, folder, init={"weights": "{folder}/w.npy"})
    assert outputs(run_child(models))["vectors"] == SOURCE_VECTORS
    np.save(folder / "w.npy", np.array([9.0, 1.0, 1.0], dtype=np.float32))

    assert f"the code in {folder} changed since trust_code listed it" in refusal(run_child(models))


def test_a_module_of_the_folders_name_imported_from_elsewhere_is_refused(tmp_path):
    folder = write_folder(tmp_path / "code")
    marker = tmp_path / "planted-ran"
    write_folder(tmp_path / "elsewhere", helper=EVIL.format(marker=str(marker)))
    models = registry(tmp_path, folder)

    proc = run_child(models, "preimport")

    last = refusal(proc)
    assert "tiny uses module 'helper' from" in last and f"{tmp_path / 'elsewhere' / 'helper.py'}" in last and f"allowlisted {folder}" in last
    assert "vectors" not in proc.stdout


def test_weights_passed_in_init_from_outside_the_folder_key_the_revision(tmp_path):
    folder = write_folder(tmp_path / "code")
    weights = tmp_path / "weights" / "w.npy"
    weights.parent.mkdir()
    np.save(weights, np.array([1.0, 1.0, 1.0], dtype=np.float32))
    models = registry(tmp_path, folder, init={"weights": "{folder}/../weights/w.npy"})

    first = outputs(run_child(models))
    np.save(weights, np.array([2.0, 1.0, 1.0], dtype=np.float32))
    second = outputs(run_child(models))

    assert first["vectors"] == SOURCE_VECTORS and second["vectors"][0][0] == 20.0
    assert "+init.weights@" in first["revision"] and first["revision"] != second["revision"]  # other weights: other keys


HUB_TINY = """
import numpy as np
from huggingface_hub import hf_hub_download


class Tiny:
    def __init__(self, repo):
        self.w = np.load(hf_hub_download(repo, "w.npy"))

    def encode(self, texts=None):
        return np.array([[len(t), 1.0, 1.0] for t in texts], dtype=np.float32) * self.w
"""


def fake_hub(cache: Path, repo: str, commit: str) -> None:
    base = cache / f"models--{repo.replace('/', '--')}"
    (base / "snapshots" / commit).mkdir(parents=True)
    np.save(base / "snapshots" / commit / "w.npy", np.array([1.0, 1.0, 1.0], dtype=np.float32))
    (base / "refs").mkdir(exist_ok=True)
    (base / "refs" / "main").write_text(commit)


def test_a_hub_repository_the_code_loads_must_be_pinned_to_the_commit_it_loads(tmp_path):
    folder = write_folder(tmp_path / "code")
    (folder / "tiny.py").write_text(HUB_TINY)
    cache = tmp_path / "hub"
    old, new = "a" * 40, "b" * 40
    fake_hub(cache, "org/tiny-weights", old)
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}

    unpinned = refusal(run_child(registry(tmp_path, folder, init={"repo": "org/tiny-weights"}), env=env))
    assert unpinned.endswith(
        f"model tiny: refused: it loads org/tiny-weights at commit {old} from the hub cache, and settings.hub does not pin it: "
        f"add {{org/tiny-weights: {old}}} to settings.hub"
    )

    models = registry(tmp_path, folder, init={"repo": "org/tiny-weights"}, hub={"org/tiny-weights": old})
    got = outputs(run_child(models, env=env))
    assert got["vectors"] == [[5.0, 1.0, 1.0], [3.0, 1.0, 1.0]] and got["revision"].endswith(f"+hub:org/tiny-weights@{old[:12]}")

    fake_hub(cache, "org/tiny-weights", new)  # the cache's main moved on: the code would load other weights under the same name
    moved = refusal(run_child(models, env=env))
    assert f"it loads org/tiny-weights at commit {new} from the hub cache, and settings.hub pins {old}" in moved


def test_weights_the_code_opens_from_outside_that_nothing_names_are_refused(tmp_path):
    folder = write_folder(tmp_path / "code")
    weights = tmp_path / "elsewhere.npy"
    np.save(weights, np.array([1.0, 1.0, 1.0], dtype=np.float32))
    lazy = TINY.replace("self.w = np.load(weights) if weights else np.ones(3, dtype=np.float32)", f"self.w = None\n        self.path = {str(weights)!r}")
    lazy = lazy.replace("return np.array(", "self.w = np.load(self.path) if self.w is None else self.w\n        return np.array(")
    (folder / "tiny.py").write_text(lazy)  # opened on the first encode, not in the constructor

    proc = run_child(registry(tmp_path, folder))

    assert f"model tiny: refused: it loads weights {weights} from outside its allowlisted folders" in refusal(proc)
    assert "vectors" not in proc.stdout


def test_a_weights_folder_given_in_init_is_hashed_as_it_is_read_links_followed_pickles_included(tmp_path):
    from medbench_core.retrieval.trusted_code import path_digest

    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snapshot.mkdir()
    (blobs / "b1").write_bytes(pickle.dumps({"w": 1}, protocol=4))  # outside a code folder medbench only hashes it
    (snapshot / "model.pt").symlink_to(blobs / "b1")  # as a hub snapshot links its files to their blobs
    first = path_digest(snapshot)
    assert first == path_digest(snapshot) and len(first) == 64
    (blobs / "b1").write_bytes(pickle.dumps({"w": 2}, protocol=4))
    assert path_digest(snapshot) != first  # other bytes behind the link: another revision
