"""The house rules on imports.

medbench_core imports no orchestration or heavy library at import time (run in a fresh
interpreter, because this test session has long since imported all of them). And the layering
of README "Layout", read from the source with ``ast`` (every import, at module level or inside a
function):

    medbench_core      imports none of ours, and no dagster, mlflow or dvc
    runtime            medbench_core
    assets             medbench_core, runtime (never runtime.settings: the environment reaches assets through resources)
    orchestration      medbench_core, runtime, assets
    medbench_release   medbench_core (no Dagster)
    medbench_cli       any of the above

and inside medbench_core one direction, floor by floor (``CORE_FLOORS``, lowest first): a module
imports its own sub-package or top-level module and those of lower floors, never one of its own
floor or a higher one (taskdata <- retrieval <- evaluation; docs/architecture.md, "Inside medbench_core").
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("dagster", "mlflow", "dvc", "torch", "faiss", "great_expectations", "mteb")

PROBE = """
import importlib, json, pkgutil, sys
import medbench_core
bare = sorted(m for m in sys.modules)
names = [info.name for info in pkgutil.walk_packages(medbench_core.__path__, "medbench_core.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"package": bare, "all": sorted(sys.modules), "n": len(names)}))
"""


def top_level(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_importing_medbench_core_imports_no_heavy_library():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    )
    seen = json.loads(out.stdout)
    assert seen["n"] >= 60  # every module of the library, in every subpackage, was imported, not just the package
    for which in ("package", "all"):
        assert top_level(seen[which]) & set(FORBIDDEN) == set(), which


def test_the_probe_would_notice_a_heavy_import():
    # The same check on a module that does import one of them must fail.
    out = subprocess.run([sys.executable, "-c", "import json, sys, faiss; print(json.dumps(sorted(sys.modules)))"], capture_output=True, text=True, check=True)
    assert "faiss" in top_level(json.loads(out.stdout))


# --- layering -----------------------------------------------------------------------------
PACKAGES = ("medbench_core", "runtime", "assets", "orchestration", "medbench_release", "medbench_cli")
MAY_IMPORT = {
    "medbench_core": set(),
    "runtime": {"medbench_core"},
    "assets": {"medbench_core", "runtime"},
    "orchestration": {"medbench_core", "runtime", "assets"},
    "medbench_release": {"medbench_core"},
    "medbench_cli": {"medbench_core", "runtime", "assets", "orchestration", "medbench_release"},
}
# Third-party packages a layer must not import at all.
NEVER_IMPORT = {
    "medbench_core": {"dagster", "mlflow", "dvc"},
    "medbench_release": {"dagster"},
}


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of our packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def located_imports(path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, at module level or inside a function: ours resolved
    to the module (``from pkg import mod`` -> ``pkg.mod``), others by name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in known]
            found.extend((node.lineno, name) for name in subs or [node.module])
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every module ``path`` imports (:func:`located_imports` without the lines)."""
    return {name for _, name in located_imports(path, known)}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), or a node importing itself."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def package(module: str) -> str:
    return module.split(".")[0]


def test_every_package_imports_only_the_layers_below_it():
    bad = []
    for module, deps in graph().items():
        for dep in deps:
            target = package(dep)
            if target in PACKAGES and target != package(module) and target not in MAY_IMPORT[package(module)]:
                bad.append(f"{module} imports {dep}")
            if target in NEVER_IMPORT.get(package(module), ()):
                bad.append(f"{module} imports {dep}")
    assert bad == []


# No circle is tolerated: keys use declared versions, so moving an import re-keys nothing.
KNOWN_CIRCLES: list[list[str]] = []


def test_no_import_circle_between_modules():
    """Lazy imports inside functions count too: that is how definitions -> schedules -> registry_sync -> definitions closed."""
    assert cycles(graph()) == KNOWN_CIRCLES


def test_assets_never_read_the_settings_or_import_the_wiring_or_the_command_line():
    for module, deps in graph().items():
        if package(module) == "assets":
            assert not {d for d in deps if d == "runtime.settings" or package(d) in ("orchestration", "medbench_cli")}, module


def test_private_dagster_imports_say_why():
    """A ``dagster._...`` import is allowed only where no public API exists, with a comment saying so just above it."""
    seen = []
    for module, path in modules().items():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dagster._"):
                above = " ".join(lines[max(0, node.lineno - 4) : node.lineno]).lower()
                assert "private" in above, f"{module}:{node.lineno} imports {node.module} without saying why"
                seen.append(module)
    # medbench_cli.webserver: `dagster dev` has no public hook for the webserver it starts (a Host check, issue 24.5).
    # medbench_cli.inprocess: no public way to stop a run executing in process after SIGTERM (issue 29).
    # orchestration.plan, orchestration.preparation: the tags a materialisation's data and code versions are stored under
    # (CODE_VERSION_TAG, DATA_VERSION_TAG) have no public name; the run plan reads them as the UI does (issue 53).
    allowed = {"orchestration.freshness", "orchestration.registry_sync", "medbench_cli.webserver", "medbench_cli.inprocess", "orchestration.plan",
               "orchestration.preparation"}  # fmt: skip
    assert set(seen) <= allowed


def test_the_checks_would_notice_a_circle_and_a_layer_violation(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    (tmp_path / "m.py").write_text("def f():\n    from orchestration.definitions import build_definitions\n    import runtime.settings\n")
    assert imports(tmp_path / "m.py", modules()) == {"orchestration.definitions", "runtime.settings"}


@pytest.mark.parametrize("name", ["orchestration.definitions", "assets.stage", "medbench_cli.run", "medbench_release.release"])
def test_the_module_map_knows_the_layers(name):
    assert name in modules()


def test_test_file_names_are_unique_across_folders():
    """The test folders are not packages: two test files with one basename stop the whole collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


# --- inside medbench_core -----------------------------------------------------------------
# One direction inside the library (docs/architecture.md, "Inside medbench_core"), lowest floor
# first. A unit is a sub-package of medbench_core or a module at its top level ("__init__" is the
# package's face, run before any of its modules). A module may import its own unit and the units
# of lower floors; never a unit of its own floor or of a higher one. A new top-level module or
# sub-package needs a place here (test_every_unit_of_the_core_has_a_floor).
CORE_FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "memory", "metric_names", "progress", "provenance"),  # import none of ours
    ("__init__", "storage", "yaml_file"),  # the errors
    ("hub",),  # hub snapshots, written through storage
    ("taskdata",),  # the task model, readers, catalogue, contracts, licences, MTEB's metadata
    ("layout",),  # the folder layout, STAGES and the gate rule (over taskdata's contracts)
    ("retrieval",),  # models and kinds, indices, expansions: the stages up to the run
    ("evaluation", "status"),  # scoring, reports, exports, judging, run records; "is it done?"
    ("site",),  # the leaderboard as a static site, from what evaluation saved
)


def core_unit(module: str) -> str:
    """``medbench_core.retrieval.kinds.base`` -> ``retrieval``; ``medbench_core.storage`` -> ``storage``; the package -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def core_floors() -> dict[str, int]:
    return {unit: floor for floor, units in enumerate(CORE_FLOORS) for unit in units}


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def core_violations(files: dict[str, Path], known: dict[str, Path]) -> list[str]:
    """``file:line: module (unit, floor) imports dep (unit, floor)`` for every import of ``files``
    (dotted name -> file of medbench_core) that goes sideways or up the floors."""
    floor, bad = core_floors(), []
    for module, path in files.items():
        here = core_unit(module)
        for line, dep in sorted(located_imports(path, known)):
            there = core_unit(dep)
            if package(dep) == "medbench_core" and there != here and floor[there] >= floor[here]:
                bad.append(f"{shown(path)}:{line}: {module} ({here}, floor {floor[here]}) imports {dep} ({there}, floor {floor[there]})")
    return bad


def core_modules() -> dict[str, Path]:
    return {name: path for name, path in modules().items() if package(name) == "medbench_core"}


def test_every_unit_of_the_core_has_a_floor():
    units = {core_unit(name) for name in core_modules()}
    assert sorted(units - set(core_floors())) == []  # a new module or sub-package: give it its floor in CORE_FLOORS
    assert sorted(set(core_floors()) - units) == []  # a unit that is gone: take it out
    assert sum(len(units) for units in CORE_FLOORS) == len(core_floors())  # each on one floor


def test_inside_medbench_core_imports_point_one_way():
    assert core_violations(core_modules(), modules()) == []


def test_medbench_core_imports_absolutely():
    """The floors are read from absolute import paths; a relative import would slip past them."""
    relative = [
        f"{shown(path)}:{node.lineno}"
        for path in core_modules().values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert relative == []


def test_the_core_check_would_notice_an_import_going_back_up(tmp_path):
    # retrieval's stages importing evaluation (at module level, and inside a function), taskdata importing
    # retrieval, and a top-level module of the lowest floor importing one beside it: each named with its line.
    (tmp_path / "stages.py").write_text(
        "from medbench_core.errors import DataError\n"
        "from medbench_core.evaluation.metrics import evaluate_frame\n"
        "from medbench_core.retrieval.ranking import write_trec_file\n"
        "def f():\n"
        "    from medbench_core.evaluation import scoring\n"
    )
    (tmp_path / "mteb_tasks.py").write_text("import medbench_core.retrieval.stages\nfrom medbench_core.metric_names import DEFAULT_METRICS\n")
    (tmp_path / "provenance.py").write_text("from medbench_core import errors\n")
    files = {
        "medbench_core.retrieval.stages": tmp_path / "stages.py",
        "medbench_core.taskdata.mteb_tasks": tmp_path / "mteb_tasks.py",
        "medbench_core.provenance": tmp_path / "provenance.py",
    }
    assert core_violations(files, modules()) == [
        f"{tmp_path}/stages.py:2: medbench_core.retrieval.stages (retrieval, floor 5) imports medbench_core.evaluation.metrics (evaluation, floor 6)",
        f"{tmp_path}/stages.py:5: medbench_core.retrieval.stages (retrieval, floor 5) imports medbench_core.evaluation.scoring (evaluation, floor 6)",
        f"{tmp_path}/mteb_tasks.py:1: medbench_core.taskdata.mteb_tasks (taskdata, floor 3) imports medbench_core.retrieval.stages (retrieval, floor 5)",
        f"{tmp_path}/provenance.py:1: medbench_core.provenance (provenance, floor 0) imports medbench_core.errors (errors, floor 0)",
    ]
