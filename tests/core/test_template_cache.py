"""Compiled Jinja templates kept between processes (medbench_core/storage/template_cache.py, issue 52): the leaderboard's
site and Great Expectations' data docs render the same pages from cached code, compile nothing the second time, and
never fail for want of a cache."""

from __future__ import annotations

import pytest

from medbench_core.site import SiteInputs, build_site
from medbench_core.site.build import _env
from medbench_core.storage import template_cache
from tests.core.site_world import build_world

TEMPLATES = ["overview.html.j2", "task.html.j2", "model.html.j2", "versions.html.j2"]


def compiling(env) -> list[str]:
    """Record the names of the templates ``env`` compiles from source from now on."""
    names: list[str] = []
    inner = env.compile

    def compile_(source, name=None, filename=None, raw=False, defer_init=False):
        names.append(name)
        return inner(source, name, filename, raw, defer_init)

    env.compile = compile_
    return names


def test_a_second_environment_compiles_no_template_the_first_cached(tmp_path):
    cache = template_cache.make_bytecode_cache(tmp_path / "jinja")
    first, second = _env(cache), _env(cache)
    compiled_first, compiled_second = compiling(first), compiling(second)
    for name in TEMPLATES:
        first.get_template(name)
    # each page template compiled once and stored (what it extends is loaded when it renders), then loaded as code
    assert sorted(compiled_first) == sorted(TEMPLATES)
    assert len(list((tmp_path / "jinja").glob("__jinja2_*.cache"))) == len(TEMPLATES)
    for name in TEMPLATES:
        second.get_template(name)
    assert compiled_second == []
    # no cache: every environment compiles again (what each run did before)
    uncached = _env(False)
    compiled_uncached = compiling(uncached)
    uncached.get_template("overview.html.j2")
    assert "overview.html.j2" in compiled_uncached


def test_a_changed_template_is_compiled_again(tmp_path):
    import jinja2

    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "page.j2").write_text("one {{ x }}")
    cache = template_cache.make_bytecode_cache(tmp_path / "jinja")

    def env():
        return jinja2.Environment(loader=jinja2.FileSystemLoader(folder), bytecode_cache=cache)

    assert env().get_template("page.j2").render(x=1) == "one 1"
    (folder / "page.j2").write_text("two {{ x }}")
    assert env().get_template("page.j2").render(x=2) == "two 2"  # the source's checksum no longer the cached code's


def test_the_site_is_the_same_bytes_with_and_without_the_cache(tmp_path, monkeypatch):
    world = build_world(tmp_path / "w")
    pages = {}
    for run, cache in (("none", False), ("cold", template_cache.make_bytecode_cache(tmp_path / "jinja")), ("warm", None)):
        if cache is None:  # the default cache, pointed at the folder the cold build filled
            monkeypatch.setattr(template_cache, "bytecode_cache", lambda: template_cache.make_bytecode_cache(tmp_path / "jinja"))
        else:
            monkeypatch.setattr(template_cache, "bytecode_cache", lambda cache=cache: cache)
        build_site(tmp_path / run, SiteInputs(world.board, data_root=world.data))
        pages[run] = {p.relative_to(tmp_path / run): p.read_bytes() for p in sorted((tmp_path / run).rglob("*.html"))}
    assert pages["none"] and list(tmp_path.joinpath("jinja").glob("__jinja2_*.cache"))
    assert pages["cold"] == pages["none"] and pages["warm"] == pages["none"]


def test_a_full_disk_while_storing_code_is_not_an_error(tmp_path, monkeypatch):
    import tempfile

    cache = template_cache.make_bytecode_cache(tmp_path / "jinja")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", full)
    env = _env(cache)
    assert env.get_template("base.html.j2") is not None
    assert list((tmp_path / "jinja").iterdir()) == []


def test_a_folder_that_cannot_be_made_gives_no_cache(tmp_path):
    (tmp_path / "file").write_text("x")
    assert template_cache.make_bytecode_cache(tmp_path / "file" / "jinja") is None


def test_gx_data_docs_are_built_by_its_own_views_with_the_cache(tmp_path, monkeypatch):
    from great_expectations.render.view import DefaultJinjaIndexPageView, DefaultJinjaPageView

    from medbench_core.taskdata.contracts import gx_views, validate_task
    from tests.core.test_contracts import text_task

    cache = template_cache.make_bytecode_cache(tmp_path / "jinja")
    monkeypatch.setattr(template_cache, "bytecode_cache", lambda: cache)
    page, index = gx_views.CachedJinjaPageView, gx_views.CachedJinjaIndexPageView
    assert issubclass(page, DefaultJinjaPageView) and issubclass(index, DefaultJinjaIndexPageView)
    assert page().env.bytecode_cache is cache and index().env.bytecode_cache is cache
    with pytest.raises(AttributeError):
        gx_views.SomethingElse  # noqa: B018
    res = validate_task(text_task(), tmp_path / "gate")
    assert res.passed, res.message
    assert res.data_docs_path.is_file() and list((tmp_path / "gate" / "data_docs" / "validations").rglob("*.html"))
    stored = set((tmp_path / "jinja").glob("__jinja2_*.cache"))
    assert len(stored) > 10  # GX's page, section and index templates
    # a second build (the overlap gate after a curation, or the next run) loads them: nothing new is stored
    res = validate_task(text_task(), tmp_path / "gate2")
    assert res.passed and set((tmp_path / "jinja").glob("__jinja2_*.cache")) == stored
