"""The leaderboard as a static site: pages people open in a browser, with no server and no network.

Built from what the leaderboard stage saved (``leaderboard.json``) and the provenance stored beside
the artifacts (each curated task's ``task.json``, ``MANIFEST.json``, ``GATE.json`` and contract
outcomes; each cell's ``metrics.json`` and ``per_query.parquet``; ``versions/*.json``), never by
recomputing a run:

- ``index.html`` (overview): models x tasks, the configured metric with its CI and the significance
  mark; sort by any column, filter tasks by modality, language, licence and benchmark family and
  models by kind; the average over the tasks every shown model reads, recomputed in the page;
  rank intervals and group letters on demand; a chance row where the data has chance floors.
- ``tasks/<task>.html``: every metric, every figure the leaderboard holds per cell (extra fields
  included, whatever they are), breakdowns, per-query plots against the baseline, trust, licences,
  contracts, source files and hashes.
- ``models/<model>.html``: revision, kind, settings, declared training data, every cell with its
  MLflow run, artifact keys and Dagster partition, and the command that re-runs it.
- ``versions.html``: the released versions side by side, moved cells and why.
- ``plots/``: SVG plots with their data as CSV beside them.

Every string reaches the pages through Jinja2 with autoescaping; the script and the style sheet are
this package's own (``static/``), so a page loads nothing from anywhere else.
"""

from medbench_core.site.build import SiteInputs, UiLinks, build_site

__all__ = ["SiteInputs", "UiLinks", "build_site"]
