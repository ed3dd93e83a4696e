"""No production module over 450 lines unless docs/architecture.md names it, with the reason (issue 50 item 7).

A module that long usually holds more than one idea; the few that hold one idea and would only be scattered by a
split are listed in the section "Modules over 450 lines" of docs/architecture.md, one bullet each: the path in
backquotes, then why. A listed module that is no longer over the limit is a stale entry and fails too, so the list
stays the true list of exceptions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 450
PRODUCTION = ("medbench_core", "medbench_release", "medbench_cli", "assets", "orchestration", "runtime")
SECTION = "## Modules over 450 lines"
_BULLET = re.compile(r"^- `(?P<path>[^`]+\.py)`(?P<reason>.*)$")


def line_count(path: Path) -> int:
    """Lines as ``wc -l`` counts them (a last line without a newline counts too)."""
    return len(path.read_text(encoding="utf-8").splitlines())


def long_modules(root: Path = ROOT, limit: int = LIMIT) -> dict[str, int]:
    """Path (relative to ``root``, with /) -> lines, for every production module over ``limit`` lines."""
    found = {}
    for package in PRODUCTION:
        for path in sorted((root / package).rglob("*.py")):
            lines = line_count(path)
            if lines > limit:
                found[path.relative_to(root).as_posix()] = lines
    return found


def named_exceptions(doc: str) -> dict[str, str]:
    """Path -> reason for each bullet of the section ``SECTION`` of ``doc`` (up to the next heading of its level or above).

    A bullet must be ``- `path.py` reason`` with a reason of its own; anything else in the section is prose."""
    lines = doc.splitlines()
    if SECTION not in lines:
        return {}
    out = {}
    for line in lines[lines.index(SECTION) + 1 :]:
        if re.match(r"^#{1,2} ", line):
            break
        m = _BULLET.match(line)
        if m:
            reason = m["reason"].strip(" :-\u2013\u2014")
            assert reason, f"docs/architecture.md names {m['path']} over {LIMIT} lines without a reason"
            out[m["path"]] = reason
    return out


def problems(long: dict[str, int], named: dict[str, str]) -> list[str]:
    """What is wrong between the modules that are long and those the section names."""
    out = [
        f"{path}: {lines} lines (over {LIMIT}); split it by idea, or name it in docs/architecture.md, {SECTION!r}, with the reason"
        for path, lines in sorted(long.items())
        if path not in named
    ]
    out += [
        f"{path}: named in docs/architecture.md {SECTION!r} but not over {LIMIT} lines (or gone); take it out of the list"
        for path in sorted(named)
        if path not in long
    ]
    return out


def test_every_module_over_the_limit_is_a_named_exception_and_every_named_one_still_is():
    named = named_exceptions((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert named, f"docs/architecture.md has no {SECTION!r} section with bullets"
    assert problems(long_modules(), named) == []


DOC = """# Title

## Modules over 450 lines

Prose about them.

- `pkg/big.py`: one idea (a table).
- `pkg/was_big.py` a reason
- `pkg/no_reason.py`

## Next section

- `pkg/elsewhere.py`: not in the section
"""


def test_the_check_notices_an_unnamed_long_module_and_a_stale_exception(tmp_path):
    pkg = tmp_path / "medbench_core"
    pkg.mkdir()
    (pkg / "big.py").write_text("x = 1\n" * (LIMIT + 1))
    (pkg / "also_big.py").write_text("x = 1\n" * LIMIT + "y = 2")  # 451 lines, the last without a newline
    (pkg / "at_limit.py").write_text("x = 1\n" * LIMIT)
    assert long_modules(tmp_path) == {"medbench_core/big.py": LIMIT + 1, "medbench_core/also_big.py": LIMIT + 1}

    doc = DOC.replace("- `pkg/no_reason.py`\n", "").replace("pkg/", "medbench_core/")
    named = named_exceptions(doc)
    assert named == {"medbench_core/big.py": "one idea (a table).", "medbench_core/was_big.py": "a reason"}
    assert problems(long_modules(tmp_path), named) == [
        f"medbench_core/also_big.py: {LIMIT + 1} lines (over {LIMIT}); split it by idea, or name it in docs/architecture.md, {SECTION!r}, with the reason",
        f"medbench_core/was_big.py: named in docs/architecture.md {SECTION!r} but not over {LIMIT} lines (or gone); take it out of the list",
    ]


def test_an_exception_without_a_reason_is_refused():
    with pytest.raises(AssertionError, match="pkg/no_reason.py over 450 lines without a reason"):
        named_exceptions(DOC)
