"""No function or class of the product that nothing but tests uses (tests/dead_code.py, issue 50 item 6)."""

import textwrap
from pathlib import Path

from tests.dead_code import ALLOWED, caller_roots, production_roots, unused


def test_every_function_and_class_of_the_product_has_a_caller_outside_tests():
    assert unused(production_roots(), caller_roots()) == []


def test_the_allowlist_is_short_and_each_entry_is_still_defined():
    assert len(ALLOWED) <= 5
    sources = "\n".join(p.read_text() for root in production_roots() for p in root.rglob("*.py"))
    for name in ALLOWED:
        assert f"def {name}(" in sources or f"{name} = " in sources, name


def write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(text))


def test_the_check_finds_what_only_tests_or_itself_call_and_no_more(tmp_path):
    pkg, bench, tests = tmp_path / "pkg", tmp_path / "bench", tmp_path / "tests"
    write(
        pkg,
        "a.py",
        """
        import functools

        def dead(): return 1

        def recursive(n): return recursive(n - 1) if n else 0

        def called(): return 2

        def in_registry(): return 3

        def by_bench(): return 4

        def by_all(): return 5

        def decorated_by(f): return f

        @decorated_by
        def only_tests(): return called()

        class Plugin: pass

        class Unused: pass

        __all__ = ["by_all"]
        """,
    )
    write(pkg, "b.py", 'from pkg.a import Plugin\nKINDS = {"p": Plugin}\nREGISTRY = {"x": "pkg.a:in_registry"}\n')
    write(bench, "bench_a.py", "from pkg.a import by_bench\nby_bench()\n")
    write(tests, "test_a.py", "from pkg.a import dead, only_tests, recursive, Unused\n")
    found = unused([pkg], [bench], base=tmp_path, allowed={})
    assert found == ["pkg/a.py:4: dead", "pkg/a.py:6: recursive", "pkg/a.py:19: only_tests", "pkg/a.py:23: Unused"]
    # what bench/ calls is used; without bench/ among the callers it is not
    assert "pkg/a.py:10: in_registry" not in found
    assert unused([pkg], [], base=tmp_path, allowed={}) == sorted([*found, "pkg/a.py:12: by_bench"], key=lambda s: int(s.split(":")[1]))
    assert unused([pkg], [bench], base=tmp_path, allowed={"dead": "called by a library"}) == found[1:]
