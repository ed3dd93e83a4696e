"""How scripts/test spreads the suite over xdist workers (tests/scheduling.py)."""

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import processes
from tests.scheduling import ModuleScheduling, heaviest_scopes_first, scope_of

ROOT = Path(__file__).resolve().parents[1]


def item(nodeid: str, *marks: str):
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: name if name in marks else None)


def test_a_module_is_one_unit_and_the_release_folder_is_one_unit():
    assert scope_of("tests/core/test_bm25.py::test_a[x::y]") == "tests/core/test_bm25.py"
    assert scope_of("tests/core/test_bm25.py::TestA::test_b") == "tests/core/test_bm25.py"
    assert scope_of("tests/release/test_versioning.py::test_a") == scope_of("tests/release/test_pull_keeps_data.py::test_b") == "tests/release/"


def test_heaviest_scopes_come_first_and_each_keeps_its_own_order():
    items = [
        item("tests/a.py::t1"),
        item("tests/a.py::t2"),  # a: weight 2
        item("tests/b.py::t1", "slow"),  # b: 20 + 1 = 21
        item("tests/b.py::t2"),
        item("tests/release/test_x.py::t1", "server"),  # release: 20 + 20 = 40
        item("tests/c.py::t1"),  # c: 2, after a (seen first)
        item("tests/release/test_y.py::t1", "dvc"),
        item("tests/c.py::t2"),
    ]
    order = [i.nodeid for i in heaviest_scopes_first(items)]
    assert order == [
        "tests/release/test_x.py::t1",
        "tests/release/test_y.py::t1",
        "tests/b.py::t1",
        "tests/b.py::t2",
        "tests/a.py::t1",
        "tests/a.py::t2",
        "tests/c.py::t1",
        "tests/c.py::t2",
    ]


@pytest.mark.slow
def test_under_xdist_each_module_and_the_release_folder_run_whole_on_one_worker_heaviest_first(tmp_path):
    """A real ``-n 2 --dist loadscope`` run of a small suite through tests/conftest.py's scheduler hook."""
    body = textwrap.dedent(
        """
        import os, pytest
        @pytest.mark.parametrize("i", range(4))
        def test_t(i, request):
            with open(os.environ["RAN_LOG"], "a") as f:
                f.write(f"{request.node.nodeid} {os.environ['PYTEST_XDIST_WORKER']}\\n")
        """
    )
    for name in ("tests/test_a.py", "tests/test_b.py", "tests/release/test_x.py", "tests/release/test_y.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body.replace("def test_t", "@pytest.mark.slow\ndef test_t") if name == "tests/test_b.py" else body)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: x\n")
    env = processes.nested_env() | {"PYTHONPATH": str(ROOT), "RAN_LOG": str(tmp_path / "ran.log")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest", "-n", "2", "--dist", "loadscope", "-q", "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    ran = [line.split() for line in (tmp_path / "ran.log").read_text().splitlines()]
    assert len(ran) == 16
    workers = {}
    for nodeid, worker in ran:
        workers.setdefault(scope_of(nodeid), set()).add(worker)
    assert sorted(workers) == ["tests/release/", "tests/test_a.py", "tests/test_b.py"]
    assert all(len(w) == 1 for w in workers.values()), workers
    first = {}  # each worker's first test: the two heaviest units went out first, one to each worker
    for nodeid, worker in ran:
        first.setdefault(worker, scope_of(nodeid))
    assert sorted(first.values()) == ["tests/release/", "tests/test_b.py"], ran
    assert ModuleScheduling.__mro__[1].__name__ == "LoadScopeScheduling"


@pytest.mark.parametrize("mark", ["slow", "model", "server", "ui", "dvc"])
def test_every_heavy_mark_of_pyproject_weighs(mark):
    items = [item("tests/a.py::t1"), item("tests/a.py::t2"), item("tests/b.py::t1", mark)]
    assert [i.nodeid for i in heaviest_scopes_first(items)][0] == "tests/b.py::t1"
