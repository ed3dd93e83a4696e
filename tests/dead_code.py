"""Functions and classes that no production code uses: an ``ast`` pass over the packages (no vulture in the lock).

A module-level ``def`` or ``class`` of a production package counts as used when its name appears in
production code anywhere outside its own body: a call, a reference (``KINDS = {"bm25": BM25Kind}``,
a decorator, ``module.name``), an ``import`` of it, ``__all__``, or a ``"module:function"`` string (the
metric registry's entries). Names are matched, not scopes, so a
name reused elsewhere hides a dead one (the check can miss, never accuse wrongly of an unused name).
Tests do not count as callers; the commands beside them do (issue 50: "no caller outside tests"): bench/
(the measurements BENCHMARKS.md reports are made with the product's own functions) and
tests/core/golden_outputs.py (``--record`` and ``--check``, which docs/architecture.md has contributors run;
it judges recorded values by medbench_release/tolerance.py's rule). What libraries or tools call by name is
in :data:`ALLOWED`, each with the reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
PRODUCTION = ("medbench_core", "runtime", "assets", "orchestration", "medbench_cli", "medbench_release")

# name -> why nothing in our code calls it although it is used
ALLOWED = {
    "main": "medbench_cli/main.py: the console script ([project.scripts] in pyproject.toml) and python -m medbench_cli",
    "defs": "orchestration/definitions.py: what Dagster loads ([tool.dagster] module_name in pyproject.toml)",
}


def _names_used(node: ast.AST) -> set[str]:
    """Every name ``node`` mentions: loads, attributes, imported names, and the strings of an ``__all__``."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.add(n.name.split(".")[-1])
        elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets):
            out |= {c.value for c in ast.walk(n.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and _REFERENCE.match(n.value):
            out.add(n.value.rsplit(":", 1)[1])  # "kernels:ndcg": a registry entry imported by name
    return out


def _statements(roots: list[Path]) -> list[tuple[Path, list[tuple[ast.stmt, set[str]]]]]:
    """(path, [(top-level statement, names it uses)]) of every module under ``roots``."""
    out = []
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            out.append((path, [(stmt, _names_used(stmt)) for stmt in tree.body]))
    return out


def unused(roots: list[Path], callers: list[Path] = (), base: Path = ROOT, allowed: dict[str, str] = ALLOWED) -> list[str]:
    """``path:line: name`` (path relative to ``base``) of every module-level function or class under ``roots``
    that nothing under ``roots`` (outside its own body) or under ``callers`` uses."""
    modules = _statements(roots)
    outside = set().union(*(names for _, stmts in _statements(list(callers)) for _, names in stmts))
    found = []
    for path, statements in modules:
        for stmt, _ in statements:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            name = stmt.name
            if name in allowed or name.startswith("__"):
                continue
            used = name in outside or any(name in names for _, stmts in modules for s, names in stmts if s is not stmt)
            if not used:
                found.append(f"{path.relative_to(base)}:{stmt.lineno}: {name}")
    return found


def production_roots(root: Path = ROOT) -> list[Path]:
    return [root / p for p in PRODUCTION]


def caller_roots(root: Path = ROOT) -> list[Path]:
    """What may call production code besides itself: the benchmarks and the golden outputs' recorder."""
    return [root / "bench", root / "tests" / "core" / "golden_outputs.py"]
