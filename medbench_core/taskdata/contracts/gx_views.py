"""Great Expectations' data-docs views with their compiled templates kept between processes (issue 52).

GX builds a new ``jinja2.Environment`` for every view it makes, so each data-docs build compiled the same templates
again (about 50 compilations for one checkpoint's docs), in every curation and every overlap gate. These are GX's own
views (``DefaultJinjaPageView``, ``DefaultJinjaIndexPageView``), named in the site's config by module and class as GX
lets a project name its views (:func:`site_views`), with :func:`medbench_core.storage.template_cache.bytecode_cache`
given to their environment: the pages are rendered by the same templates, from code compiled once.

The classes are made when GX asks this module for them (module ``__getattr__``), so importing medbench_core does not
import Great Expectations (tests/core/test_import_rules.py).
"""

from __future__ import annotations

import functools
from typing import Any

_BASES = {"CachedJinjaPageView": "DefaultJinjaPageView", "CachedJinjaIndexPageView": "DefaultJinjaIndexPageView"}


def site_views() -> dict[str, Any]:
    """The ``site_section_builders`` and ``site_index_builder`` entries of a GX ``SiteBuilder`` config that name these views
    (GX merges the sections into its defaults: only the view of each changes)."""
    page = {"module_name": __name__, "class_name": "CachedJinjaPageView"}
    return {
        "site_section_builders": {section: {"view": dict(page)} for section in ("expectations", "validations", "profiling")},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder", "view": {"module_name": __name__, "class_name": "CachedJinjaIndexPageView"}},
    }


@functools.cache
def _view_class(name: str) -> type:
    from great_expectations.render import view

    from medbench_core.storage import template_cache

    base = getattr(view, _BASES[name])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)
        self.env.bytecode_cache = template_cache.bytecode_cache()  # None where no cache can be made: compiled as before

    return type(name, (base,), {"__init__": __init__, "__module__": __name__, "__doc__": f"GX's {_BASES[name]}, its templates' code kept."})


def __getattr__(name: str) -> type:
    if name in _BASES:
        return _view_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
