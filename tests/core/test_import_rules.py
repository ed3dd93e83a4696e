"""The house rule: medbench_core imports no orchestration or heavy library at import time.

Run in a fresh interpreter, because this test session has long since imported all of them.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("dagster", "mlflow", "dvc", "torch", "faiss", "great_expectations")

PROBE = """
import importlib, json, pkgutil, sys
import medbench_core
bare = sorted(m for m in sys.modules)
for info in pkgutil.iter_modules(medbench_core.__path__):
    importlib.import_module("medbench_core." + info.name)
print(json.dumps({"package": bare, "all": sorted(sys.modules), "n": len(list(pkgutil.iter_modules(medbench_core.__path__)))}))
"""


def top_level(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_importing_medbench_core_imports_no_heavy_library():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    seen = json.loads(out.stdout)
    assert seen["n"] >= 15  # every module of the library was imported, not just the package
    for which in ("package", "all"):
        assert top_level(seen[which]) & set(FORBIDDEN) == set(), which


def test_the_probe_would_notice_a_heavy_import():
    # The same check on a module that does import one of them must fail.
    out = subprocess.run([sys.executable, "-c", "import json, sys, faiss; print(json.dumps(sorted(sys.modules)))"], capture_output=True, text=True, check=True)
    assert "faiss" in top_level(json.loads(out.stdout))
