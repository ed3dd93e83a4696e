"""Packages of pyproject.toml's ``test`` extra only (ranx, the references of the tests) are never imported by the product
(issue 50 item 6): ``pip install medbench`` without the extra must run every command. The lock installs them all for the
test command; this holds the line that the product does not lean on them."""

import ast
import tomllib

from tests.core.test_import_rules import PACKAGES, ROOT

# Distribution -> the module it installs, where the two names differ.
MODULE_OF = {"pytrec-eval-terrier": "pytrec_eval", "ir-measures": "ir_measures", "pytest-timeout": "pytest_timeout", "pytest-xdist": "xdist"}


def modules_of_the_test_extra() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {d.split("==")[0].split("[")[0].lower() for d in project["dependencies"]}
    extra = {d.split("==")[0].split("[")[0].lower() for d in project["optional-dependencies"]["test"]}
    return {MODULE_OF.get(d, d.replace("-", "_")) for d in extra - runtime}


def product_imports() -> dict[str, list[str]]:
    """Top-level module -> the places (file:line) of the product that import it, at module level or in a function."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_ranx_is_a_test_dependency_only():
    modules = modules_of_the_test_extra()
    assert {"ranx", "pytrec_eval", "ir_measures", "pytest"} <= modules
    imports = product_imports()
    assert "numpy" in imports and "scipy" in imports  # the scan sees the product's imports
    assert {m: imports[m] for m in sorted(modules) if m in imports} == {}


def test_the_check_would_notice_an_import(tmp_path, monkeypatch):
    import tests.core.test_test_only_packages as me

    (tmp_path / "medbench_core").mkdir()
    (tmp_path / "medbench_core" / "m.py").write_text("def f():\n    import ranx.fusion\n")
    monkeypatch.setattr(me, "ROOT", tmp_path)
    monkeypatch.setattr(me, "PACKAGES", ("medbench_core",))
    assert me.product_imports() == {"ranx": ["medbench_core/m.py:2"]}
