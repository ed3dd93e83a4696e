"""How `scripts/test` spreads the suite over xdist workers: whole modules, heaviest first.

A module is one unit of work, so its module fixtures (a built world, a loaded model) are built once;
tests/release/ is one unit, so its session world (tests/release/conftest.py) is built once too. The
workers collect the modules ordered by weight, the number of their tests that start processes,
servers or models (the marks of pyproject.toml), so that the long ones start first and the last
minutes are spread over short ones (longest-processing-time-first).
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

HEAVY_MARKS = ("slow", "model", "server", "ui", "dvc")
HEAVY_WEIGHT = 20  # a marked test takes 10-120 s, an unmarked one well under a second
SHARED_SCOPES = ("tests/release/",)  # folders whose modules share a session fixture


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or the folder of :data:`SHARED_SCOPES` it is in."""
    return next((folder for folder in SHARED_SCOPES if nodeid.startswith(folder)), nodeid.split("::", 1)[0])


def weight(item: pytest.Item) -> int:
    return HEAVY_WEIGHT if any(item.get_closest_marker(m) for m in HEAVY_MARKS) else 1


def heaviest_scopes_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with their scopes ordered by total weight, heaviest first; the order inside a scope kept (a stable sort)."""
    scopes = [scope_of(item.nodeid) for item in items]
    totals: dict[str, int] = {}
    for scope, item in zip(scopes, items):
        totals[scope] = totals.get(scope, 0) + weight(item)
    first_seen = {scope: i for i, scope in enumerate(totals)}
    order = sorted(range(len(items)), key=lambda i: (-totals[scopes[i]], first_seen[scopes[i]]))
    return [items[i] for i in order]


class ModuleScheduling(LoadScopeScheduling):
    """xdist's ``--dist loadscope`` with :func:`scope_of` as the scope, in the order the workers collected."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        config.option.loadscopereorder = False  # the collection already comes heaviest first

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)
