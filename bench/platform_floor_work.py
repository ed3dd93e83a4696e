"""The platform's libraries doing one partition's bookkeeping, with no medbench code: a floor, not a copy.

    python bench/platform_floor_work.py [--data BEIR_FOLDER] [--imports bm25s,Stemmer,pytrec_eval,polars] [--bare]
                                        [--lean] [--mlflow-template EMPTY_STORE.db]

Run as a side of ``bench/import_floor.py --work`` (LiveQA-MedQuAD and sentence-transformers, the
default) and of ``bench/bench_scale.py pipeline --floor`` (the scale task's BEIR folder and the bare
BM25 side's imports). ``--bare`` makes the other side of that pair: the same imports of the bare
libraries and the same reads of the task's tables, nothing of the platform, so that the difference
of the two processes' CPU is the platform's alone (its imports and its bookkeeping). ``--lean`` and
``--mlflow-template`` make each library's part as cheap as medbench's own use of it (a lower bound at
any size; without them, GX's in-set expectations over every id cost 25 CPU s at 10K rows):
Dagster's console log off, GX's in-set expectations on derived boolean columns, MLflow's store a
copy of an empty one it made rather than ~40 migrations. What ``medbench run --models all-MiniLM-L6-v2
--tasks liveqa_medquad`` asks of Dagster, Great Expectations and MLflow, done by the bare library calls
in the simplest form each allows (so what it costs is a lower bound of what any run through them costs):

- Dagster: a SQLite instance in a new DAGSTER_HOME and the four runs a partition takes (curation with
  its blocking check, the overlap check, the partition's six steps with the expansion check, the
  leaderboard), executed in process; every body does nothing;
- Great Expectations: an ephemeral context, one suite and checkpoint per table of the task (queries,
  corpus, qrels as polars reads them, handed over as pandas) with as many expectations of each type
  as medbench's contract has (28, 26 and 13; counted in its gx_results.json on 2026-11-28), results in
  COMPLETE format, data docs built (``--lean``: by GX's views with their templates' compiled code kept, as medbench's);
- MLflow: a SQLite tracking store and two runs (the partition's, the leaderboard's) with the counts a
  medbench run logs (35 params, 68 metric values, 11 tags over both), one small artifact each.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

SHARED = Path(os.environ.get("MEDBENCH_SHARED") or Path(__file__).resolve().parents[2] / "shared")
LIVEQA = SHARED / "data" / "liveqa_medquad"
BARE_IMPORTS = "sentence_transformers,polars"


def dagster_runs(home: Path, quiet: bool = False) -> None:
    """The four runs of a partition on a new SQLite instance, each body empty; ``quiet``: Dagster's console
    log off, as medbench's commands run their jobs (a run config, Dagster's public API)."""
    import dagster as dg

    @dg.asset
    def curated_task() -> None: ...

    @dg.asset_check(asset=curated_task, blocking=True)
    def task_contract():
        return dg.AssetCheckResult(passed=True)

    @dg.asset_check(asset=curated_task)
    def tasks_do_not_overlap():
        return dg.AssetCheckResult(passed=True)

    @dg.asset(deps=[curated_task])
    def corpus_embeddings() -> None: ...

    @dg.asset(deps=[curated_task])
    def query_expansion() -> None: ...

    @dg.asset_check(asset=query_expansion, blocking=True)
    def expansion_contract():
        return dg.AssetCheckResult(passed=True)

    @dg.asset(deps=[corpus_embeddings])
    def corpus_index() -> None: ...

    @dg.asset(deps=[corpus_index, query_expansion])
    def retrieval_run() -> None: ...

    @dg.asset(deps=[retrieval_run])
    def task_metrics() -> None: ...

    @dg.asset(deps=[task_metrics])
    def leaderboard() -> None: ...

    instance = dg.DagsterInstance.from_config(str(home))
    defs = dg.Definitions(
        assets=[curated_task, corpus_embeddings, query_expansion, corpus_index, retrieval_run, task_metrics, leaderboard],
        asset_checks=[task_contract, tasks_do_not_overlap, expansion_contract],
        jobs=[
            dg.define_asset_job("curate", selection=dg.AssetSelection.assets(curated_task).without_checks() | dg.AssetSelection.checks(task_contract)),
            dg.define_asset_job("overlap", selection=dg.AssetSelection.checks(tasks_do_not_overlap)),
            dg.define_asset_job("partition", selection=dg.AssetSelection.assets(corpus_embeddings, query_expansion, corpus_index, retrieval_run, task_metrics)),
            dg.define_asset_job("board", selection=dg.AssetSelection.assets(leaderboard)),
        ],
    )
    for name in ("curate", "overlap", "partition", "board"):
        run_config = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}} if quiet else None
        if not defs.resolve_job_def(name).execute_in_process(instance=instance, run_config=run_config).success:
            raise SystemExit(f"dagster job {name} failed")


def read_tables(data: Path) -> dict:
    """The task's three tables as polars reads them: table -> (frame, key column, and how many expectations of each type medbench's contract has)."""
    import polars as pl

    return {
        "queries": (pl.read_ndjson(data / "queries.jsonl").select(pl.col("_id").cast(pl.Utf8), pl.col("text")), "_id", 9, 2, 4, 2),
        "corpus": (pl.read_ndjson(data / "corpus.jsonl").select(pl.col("_id").cast(pl.Utf8), "title", "text"), "_id", 9, 2, 4, 0),
        # one row per judged pair, as curation leaves it (the file repeats some pairs)
        "qrels": (pl.read_csv(data / "qrels" / "test.tsv", separator="\t", infer_schema_length=0).unique(["query-id", "corpus-id"]), "query-id", 3, 3, 2, 0),
    }


def gx_checkpoints(docs_dir: Path, tables: dict, lean: bool = False) -> None:
    """One suite and checkpoint per table, data docs built. ``lean``: the in-set expectations test a
    boolean column (every row True) against {True}, as medbench's contract tests the columns it derives
    (``doc_id_known``, ...), instead of the key against the set of every id, whose tens of thousands of
    values GX writes into each result and data docs page (25 CPU s at 10K rows: no lower bound)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import DataContextConfig, InMemoryStoreBackendDefaults, ProgressBarsConfig

    cfg = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(), analytics_enabled=False, progress_bars=ProgressBarsConfig(globally=False))
    ctx = gx.get_context(project_config=cfg, mode="ephemeral")
    source = ctx.data_sources.add_pandas("floor")
    for name, (frame, key, columns, not_null, in_set, between) in tables.items():
        cols = frame.columns
        pick = [cols[i % len(cols)] for i in range(columns)]
        ex = [gxe.ExpectTableRowCountToBeBetween(min_value=1)]
        ex += [gxe.ExpectColumnToExist(column=c) for c in pick]
        if lean:
            import polars as pl

            frame = frame.with_columns(pl.lit(True).alias("known"))
        pdf = frame.to_pandas()
        ex += [gxe.ExpectColumnValuesToBeOfType(column=c, type_=str(pdf.dtypes[c])) for c in pick]
        ex += [gxe.ExpectColumnValuesToNotBeNull(column=cols[i % len(cols)]) for i in range(not_null)]
        ex += [gxe.ExpectColumnValuesToBeUnique(column=key)] if name != "qrels" else [gxe.ExpectCompoundColumnsToBeUnique(column_list=cols[:2])]
        if lean:
            ex += [gxe.ExpectColumnValuesToBeInSet(column="known", value_set=[True]) for _ in range(in_set)]
        else:
            ex += [gxe.ExpectColumnValuesToBeInSet(column=key, value_set=frame[key].unique().to_list()) for _ in range(in_set)]
        ex += [gxe.ExpectColumnValueLengthsToBeBetween(column=key, min_value=0) for _ in range(between)]
        suite = ctx.suites.add(gx.ExpectationSuite(name=f"floor.{name}", expectations=ex))
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole")
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"floor.{name}", data=batch, suite=suite))
        cp = ctx.checkpoints.add(gx.Checkpoint(name=f"floor.{name}", validation_definitions=[vd], result_format={"result_format": "COMPLETE"}))
        result = cp.run(batch_parameters={"dataframe": pdf})
        if not result.success:
            bad = [r.expectation_config.type for vr in result.run_results.values() for r in vr.results if not r.success]
            raise SystemExit(f"gx suite {name} failed: {bad}")
    site = {"class_name": "SiteBuilder", "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}
    if lean:  # GX's own views, their templates' compiled code kept between processes, as medbench's data docs have them
        site.update(cached_views())
    site["store_backend"] = {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)}
    ctx.add_data_docs_site(site_name="floor", site_config=site)
    ctx.build_data_docs(site_names=["floor"])


def cached_views() -> dict:
    """The data-docs site config naming GX's own page and index views with jinja's ``FileSystemBytecodeCache`` on their
    environment (medbench_core/taskdata/contracts/gx_views.py does the same; the classes are made here, by GX's and
    jinja's public API, in a module of their own that GX can name, so that the floor runs no medbench code): each
    template is compiled once, not once per view."""
    import importlib.machinery
    import sys
    import types

    import jinja2
    from great_expectations.render import view

    cache = jinja2.FileSystemBytecodeCache()
    module = types.ModuleType("floor_gx_views")
    module.__spec__ = importlib.machinery.ModuleSpec("floor_gx_views", None)
    for name, base in (("FloorPageView", view.DefaultJinjaPageView), ("FloorIndexPageView", view.DefaultJinjaIndexPageView)):

        def __init__(self, *args, _base=base, **kwargs):
            _base.__init__(self, *args, **kwargs)
            self.env.bytecode_cache = cache

        setattr(module, name, type(name, (base,), {"__init__": __init__}))
    sys.modules[module.__name__] = module
    page = {"module_name": module.__name__, "class_name": "FloorPageView"}
    return {
        "site_section_builders": {section: {"view": dict(page)} for section in ("expectations", "validations", "profiling")},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder", "view": {"module_name": module.__name__, "class_name": "FloorIndexPageView"}},
    }


def mlflow_runs(folder: Path, template: Path | None = None) -> None:
    """A new SQLite store (a copy of ``template``, an empty store MLflow made, when given: its migrations
    are not then counted, as medbench copies its own once-per-machine schema) and two runs."""
    import shutil

    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    if template is not None:
        shutil.copyfile(template, folder / "mlflow.db")
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    (folder / "artifact.json").write_text("{}")
    for exp, params, metrics, tags in (("floor", 30, 60, 6), ("floor-leaderboard", 5, 8, 5)):
        eid = client.create_experiment(exp, artifact_location=(folder / "mlartifacts" / exp).as_uri())
        run = client.create_run(eid, tags={f"tag{i}": "x" for i in range(tags)})
        client.log_batch(run.info.run_id, params=[Param(f"p{i}", "v") for i in range(params)], metrics=[Metric(f"m{i}", 0.5, 0, 0) for i in range(metrics)])
        client.log_artifact(run.info.run_id, str(folder / "artifact.json"))
        client.set_terminated(run.info.run_id)


def main() -> None:
    import argparse
    import importlib

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=LIVEQA, help="a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv); default LiveQA-MedQuAD")
    ap.add_argument("--imports", default=BARE_IMPORTS, help=f"the bare side's libraries, imported first (default {BARE_IMPORTS})")
    ap.add_argument("--bare", action="store_true", help="only those imports and the reads of the tables: the other side of the pair")
    ap.add_argument(
        "--lean", action="store_true",
        help="the bookkeeping in the cheapest form medbench's own calls take: Dagster's console log off, GX's in-set expectations on derived boolean columns",
    )  # fmt: skip
    ap.add_argument("--mlflow-template", type=Path, help="an empty SQLite store MLflow made, copied as the new store (mlflow_runs)")
    args = ap.parse_args()
    if not args.bare:
        import dagster  # noqa: F401  the platform's imports first, as in import_floor.py's platform side
        import great_expectations  # noqa: F401
        import mlflow  # noqa: F401
    for name in args.imports.split(","):
        importlib.import_module(name)
    tables = read_tables(args.data)
    # Resident memory once the libraries are imported and the tables read (modules are never unloaded:
    # the platform's share of it is under every later peak of a process that imported them).
    resident = {"rss_after_imports_gb": round(_rss_bytes() / 2**30, 4)}
    if args.bare:
        print(json.dumps(resident))
        return
    with tempfile.TemporaryDirectory(prefix="medbench-floor-") as tmp:
        root = Path(tmp)
        (root / "dagster_home").mkdir()
        (root / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        spent = {}
        parts = {
            "dagster": lambda: dagster_runs(root / "dagster_home", args.lean),
            "gx": lambda: gx_checkpoints(root / "docs", tables, args.lean),
            "mlflow": lambda: mlflow_runs(root, args.mlflow_template),
        }
        for name, part in parts.items():
            t = time.process_time()
            part()
            spent[name] = round(time.process_time() - t, 3)
    print(json.dumps({"cpu_s": spent, **resident}))


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    main()
