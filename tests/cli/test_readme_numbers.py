"""The speed and memory figures of the README and docs/ are the ones BENCHMARKS.md records (issue 13: every
number in the docs matches BENCHMARKS.md): a figure edited in one and not the other fails here."""

from __future__ import annotations

import re

from tests.orchestration.operating_env import ROOT

README = "\n\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])
BENCHMARKS = (ROOT / "BENCHMARKS.md").read_text()
FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:x| s| GB)(?!\w)")


def paragraph(start: str) -> str:
    i = README.index(start)
    return README[i : README.index("\n\n", i)]


def test_every_speed_and_memory_figure_of_the_readme_is_in_benchmarks():
    text = "\n".join(paragraph(p) for p in ("**Memory**", "**Speed**", "**A second run with nothing changed**"))
    figures = set(FIGURE.findall(text))
    assert len(figures) >= 10, figures
    missing = sorted(f for f in figures if f not in BENCHMARKS)
    assert not missing, f"README figures not in BENCHMARKS.md: {missing}"
