"""The one rule for values derived from floating-point work: how far a rebuilt (or re-run) value may differ from a recorded one.

Float sums differ across CPUs, SIMD kernel paths (``ATEN_CPU_CAPABILITY``, FAISS's SIMD level, the
BLAS and oneDNN code paths), BLAS builds and thread counts, so a rebuilt embedding may differ from
the recorded one in its last bits; vectors are accepted within ``ε`` per value
(:data:`ARRAY_TOLERANCE`, ``--tolerance``). Everything computed from them is judged by what ``ε``
allows, and by nothing looser:

- **Vectors** (:func:`vectors_verdict`): identical, else every value within ``ε``.
- **Scores** of a run are inner products ``q·d`` of vectors each within ``ε`` of the recorded ones,
  summed in float32: ``|Δ(q·d)| <= ε(‖q‖₁ + ‖d‖₁) + dim·ε² + 2·dim·u·‖q‖₂‖d‖₂`` (``u = 2⁻²⁴``; the
  last term bounds the rounding of either sum, Higham's ``γ_dim``), with the largest norms of the
  rebuilt vectors. A late-interaction score (MaxSim: the sum over ``n`` query tokens of each token's
  best inner product) moves by at most ``n`` times that, plus the rounding of its own float32 sum
  (``2·n²·u·‖q‖₂‖d‖₂``). The difference of two scores moves by at most twice that: ``τ``
  (:func:`score_tolerance`). Where the vectors are identical only the rounding terms are left.
- **Rankings** are compared up to ties within ``τ``: common documents' scores within ``τ``; a pair
  of documents may be ordered differently only where their recorded scores differ by less than
  ``τ``; a document may enter or leave the top ``k`` only where its score is within ``τ`` of the
  other run's last one (:func:`compare_rankings`).
- **Metrics** are exact (:data:`METRIC_TOLERANCE`) where the run is identical; where ties moved, every
  metric (means, CI bounds, breakdowns, and every other number of ``metrics.json``) must lie in the
  range that reordering the rebuilt run's ties allows, from every tie ordered least relevant first
  to most relevant first, both scored by medbench's own scorer (:func:`metric_bounds`): a bound
  stated with the verdict. A run built from runs whose ties moved (a fusion) is judged by its
  metrics, exactly.
- **Exact work stays exact**: a run with no vectors behind it (BM25, whose float sums run in one
  fixed order) must be identical when its inputs are; so must curated tasks, qrels and document ids.
  A run whose scores a model computes directly (a cross-encoder) is a model's float output like an
  embedding: each score within ``ε``, so ``τ = 2ε``.
- **Recorded values kept rounded** (the golden outputs keep 6 decimals) stand for any value within
  half a unit of their last place, ``ρ`` (:func:`rounding_of`): ``ε`` grows by ``ρ`` and ``τ`` by
  ``2ρ`` (:func:`widened`), nothing else.

The rule covers values *recorded* on one machine and compared on another (a benchmark version, the
golden outputs, a library's outputs recorded as numbers). Two computations of the same formula made
live in one process (medbench's nDCG against pytrec_eval's on the same run) share the machine and
its kernel path; they are held to the precision of the formula instead (docs/contributing/testing.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

U32 = 2.0**-24  # float32 unit roundoff
ARRAY_TOLERANCE = 1e-5  # ε: largest absolute difference accepted in embeddings, index and query vectors
METRIC_TOLERANCE = 1e-9  # a metric recomputed from an identical run: the same sums in another order at most
_ROWS = 1 << 16  # vectors read at a time when taking norms


@dataclass(frozen=True)
class ScoreTolerance:
    """``tau``: how far the difference of two scores of one query may move, and what it was derived from."""

    tau: float
    eps: float
    dim: int
    l1: tuple[float, float]  # largest L1 norm of a query vector, of a document vector
    l2: tuple[float, float]
    terms: int = 1  # inner products summed into one score: 1, or a late-interaction query's tokens (MaxSim)

    def describe(self) -> str:
        if self.l1 == (0.0, 0.0):  # no vectors: a model's own float outputs
            return f"τ {self.tau:.2g} (scores a model computes directly, each within {self.eps:g})"
        src = f"vectors within {self.eps:g}" if self.eps else "identical vectors"
        what = f", MaxSim over {self.terms} query tokens" if self.terms > 1 else ""
        return f"τ {self.tau:.2g} ({src}, dim {self.dim}{what}, float32 sums)"

    def to_json(self) -> dict[str, Any]:
        return {"tau": self.tau, "eps": self.eps, "dim": self.dim, "l1": list(self.l1), "l2": list(self.l2), "terms": self.terms}


def model_score_tolerance(eps: float = ARRAY_TOLERANCE) -> ScoreTolerance:
    """``τ = 2ε`` for scores a model computes directly (a cross-encoder): each a model's float output, within ``ε``."""
    return ScoreTolerance(2 * eps, eps, 1, (0.0, 0.0), (0.0, 0.0))


def _norms(arrays: Sequence[np.ndarray]) -> tuple[int, float, float]:
    """(dim, largest L1 norm, largest L2 norm) over the vectors (last axis) of ``arrays``, in float64."""
    dim = int(arrays[0].shape[-1])
    l1 = l2 = 0.0
    for a in arrays:
        rows = np.asarray(a).reshape(-1, dim)
        for start in range(0, rows.shape[0], _ROWS):
            block = rows[start : start + _ROWS].astype(np.float64)
            if block.size:
                l1 = max(l1, float(np.abs(block).sum(axis=1).max()))
                l2 = max(l2, float(np.sqrt((block * block).sum(axis=1)).max()))
    return dim, l1, l2


def score_tolerance(queries: Sequence[np.ndarray], docs: Sequence[np.ndarray], eps: float) -> ScoreTolerance | None:
    """``τ`` for inner-product scores of ``queries`` against ``docs`` whose values are within ``eps`` (see the module docstring).

    A 3-D query array ``(queries, tokens, dim)`` is a late-interaction query's token vectors: its
    score is MaxSim, a float32 sum of ``tokens`` inner products, each moving as one inner product
    does (a maximum moves no further than what it takes the maximum of). None when either side has
    no vectors or their dimensions differ: the scores do not come from these vectors by an inner
    product, and no tolerance follows.
    """
    queries, docs = [q for q in queries if q.size], [d for d in docs if d.size]
    if not queries or not docs or queries[0].shape[-1] != docs[0].shape[-1]:
        return None
    terms = max((int(q.shape[1]) for q in queries if q.ndim == 3), default=1)
    dim, l1q, l2q = _norms(queries)
    _, l1d, l2d = _norms(docs)
    # A recorded vector is within eps of the rebuilt one: its norms are within dim*eps of these.
    l1q_, l1d_ = l1q + dim * eps, l1d + dim * eps
    l2q_, l2d_ = l2q + math.sqrt(dim) * eps, l2d + math.sqrt(dim) * eps
    one = eps * (l1q_ + l1d_) + dim * eps * eps + 2 * dim * U32 * l2q_ * l2d_
    if terms > 1:  # MaxSim: each of `terms` maxima moves as one product does; the float32 sum of them rounds (either side)
        one = terms * one + 2 * terms * terms * U32 * l2q_ * l2d_
    return ScoreTolerance(2 * one, eps, dim, (l1q, l1d), (l2q, l2d), terms)


# --- recorded values -----------------------------------------------------------------------------


def rounding_of(decimals: int | None) -> float:
    """``ρ``: how far a value recorded rounded to ``decimals`` places may be from the one made (0 when kept exactly)."""
    return 0.0 if decimals is None else 0.5 * 10.0**-decimals


def widened(tau: float, rho: float) -> float:
    """``τ`` against recorded scores kept to within ``ρ``: a difference of two of them is off by up to ``2ρ``."""
    return tau + 2 * rho


@dataclass(frozen=True)
class VectorVerdict:
    """What :func:`vectors_verdict` found: ``identical``, ``within_tolerance`` or ``differs``, and the largest difference."""

    verdict: str
    worst: float
    detail: str

    @property
    def within(self) -> bool:
        return self.verdict != "differs"

    @property
    def moved(self) -> bool:
        """Whether scores computed from these vectors may have moved by ``ε``'s share (not identical)."""
        return self.verdict != "identical"


def vectors_verdict(recorded: Any, rebuilt: Any, eps: float = ARRAY_TOLERANCE, *, rho: float = 0.0, what: str = "vectors") -> VectorVerdict:
    """Rebuilt vectors (or any float values) against recorded ones: the same shape, and every value within ``eps`` (plus
    ``ρ``, the recorded values' rounding); ``identical`` where every value is equal (and the recorded ones were kept exactly)."""
    a, b = np.asarray(recorded, dtype=np.float64), np.asarray(rebuilt, dtype=np.float64)
    if a.shape != b.shape:
        return VectorVerdict("differs", math.inf, f"{what}: shape {list(b.shape)}, recorded {list(a.shape)}")
    diff = np.abs(a - b)
    nan = np.isnan(a) != np.isnan(b)
    worst = math.inf if nan.any() else float(np.nanmax(diff)) if diff.size else 0.0
    if worst == 0.0 and rho == 0.0:
        return VectorVerdict("identical", 0.0, f"{what}: identical")
    limit = eps + rho
    if worst <= limit:
        return VectorVerdict("within_tolerance", worst, f"{what}: largest difference {worst:.3g} <= ε {eps:g}" + (f" + ρ {rho:g}" if rho else ""))
    i = np.unravel_index(int(np.nanargmax(np.where(nan, np.inf, diff))), diff.shape)
    where = f" at {list(map(int, i))}" if diff.ndim else ""
    return VectorVerdict(
        "differs", worst, f"{what}: {float(b[i])!r}{where}, recorded {float(a[i])!r} (difference {worst:.3g} > ε {eps:g}" + (f" + ρ {rho:g})" if rho else ")")
    )


def _float_arrays(folder: Path | None) -> list[np.ndarray]:
    """The float arrays of 2 or more dimensions (vectors) stored in ``folder``, memory-mapped."""
    out = []
    for p in sorted(folder.glob("*.npy")) if folder is not None else []:
        try:
            a = np.load(p, mmap_mode="r", allow_pickle=False)
        except ValueError:
            continue
        if a.dtype.kind == "f" and a.ndim >= 2:
            out.append(a)
    return out


def faiss_vectors(path: Path) -> np.ndarray | None:
    """Every vector of a FAISS index (None for index types that cannot give them back)."""
    import faiss

    index = faiss.read_index(str(path))
    try:
        return index.reconstruct_n(0, index.ntotal)
    except RuntimeError:
        return None


def partition_vectors(run: Path | None, embeddings: Path | None, index: Path | None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The vectors a run's scores come from: the queries' (float arrays kept with the run) and the documents'
    (float arrays of the embeddings artifact, else the vectors of its FAISS index). Empty where there are none (BM25)."""
    queries = _float_arrays(run)
    docs = _float_arrays(embeddings)
    if not docs and index is not None:
        for p in sorted(index.glob("*.faiss")):
            v = faiss_vectors(p)
            if v is not None:
                docs.append(v)
    return queries, docs


# --- runs ----------------------------------------------------------------------------------------


Lists = dict[str, tuple[list[str], np.ndarray]]


def ranked_lists(run: pl.DataFrame) -> Lists:
    """query id -> (doc ids in rank order, their scores as float64), queries in order of first appearance."""
    frame = run.select("query_id", "doc_id", "rank", "score").with_columns(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
    order = frame.get_column("query_id").unique(maintain_order=True).to_list()
    parts = frame.sort(["query_id", "rank"]).partition_by("query_id", as_dict=True, maintain_order=True)
    out: Lists = {}
    for q in order:
        part = parts[(q,)]
        out[q] = (part.get_column("doc_id").to_list(), part.get_column("score").cast(pl.Float64).to_numpy())
    return out


def probe_lists(probe: dict[str, Any]) -> Lists:
    """A version file's run probe (:func:`medbench_release.record.run_probe`) as ranked lists."""
    return {q: ([d for d, _ in rows], np.array([s for _, s in rows], dtype=np.float64)) for q, rows in probe["queries"].items()}


def order_problem(run: pl.DataFrame) -> str | None:
    """The first place where ``run`` is not ranked by its own scores (ranks 1..n, scores never rising), or None."""
    frame = run.select("query_id", "doc_id", "rank", "score").sort(["query_id", "rank"])
    checked = frame.with_columns(
        prev_rank=pl.col("rank").shift(1).over("query_id"),
        prev_score=pl.col("score").cast(pl.Float64).shift(1).over("query_id"),
        prev_doc=pl.col("doc_id").shift(1).over("query_id"),
    )
    bad = checked.filter(
        (pl.col("prev_rank").is_null() & (pl.col("rank") != 1)) | (pl.col("rank") != pl.col("prev_rank") + 1) & pl.col("prev_rank").is_not_null()
    )
    if bad.height:
        r = bad.row(0, named=True)
        return f"query {r['query_id']}: rank {r['rank']} follows rank {r['prev_rank']}"
    bad = checked.filter(pl.col("score").cast(pl.Float64) > pl.col("prev_score"))
    if bad.height:
        r = bad.row(0, named=True)
        return (
            f"query {r['query_id']}: {r['doc_id']} at rank {r['rank']} scores {r['score']!r}, above {r['prev_doc']} at rank "
            f"{r['prev_rank']} ({r['prev_score']!r}): not ranked by its own scores"
        )
    return None


@dataclass
class RankingComparison:
    """What :func:`compare_rankings` found: the worst score difference, the pairs that swapped, and every problem."""

    queries: int = 0
    worst_score_diff: float = 0.0
    swapped_pairs: int = 0
    widest_swap: float = 0.0  # the largest published score gap between two documents that swapped
    moved_across_cutoff: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def within(self) -> bool:
        return not self.problems

    def detail(self, tau: float, what: str) -> str:
        head = (
            f"{what}: {self.queries} queries; largest score difference {self.worst_score_diff:.3g}; {self.swapped_pairs} pair(s) swapped "
            f"(widest published gap {self.widest_swap:.3g}); {self.moved_across_cutoff} document(s) across the cutoff; τ {tau:.2g}"
        )
        return head if not self.problems else f"{head}; {len(self.problems)} beyond τ, first: {self.problems[0]}"


def compare_rankings(published: Lists, rebuilt: Lists, tau: float, *, k: int, partial: bool = False) -> RankingComparison:
    """Compare a rebuilt run with the published one (or its probe: ``partial``, the top of a few queries) within ``tau``.

    A common document's score may differ by at most ``tau``; two documents may be ordered
    differently only where their published scores differ by less than ``tau``; a document in one
    list and not the other only where that list is full (``k`` documents) and its score is within
    ``tau`` of the other list's last one (a tie across the cutoff). ``partial``: the published lists
    are each query's top only, so rebuilt documents scoring within ``tau`` of their last may be absent.
    """
    out = RankingComparison()
    if not partial:
        for q in rebuilt:
            if q not in published:
                out.problems.append(f"query {q}: in the rebuilt run only")
    for q, (pdocs, pscores) in published.items():
        out.queries += 1
        if q not in rebuilt:
            out.problems.append(f"query {q}: not in the rebuilt run")
            continue
        rdocs, rscores = rebuilt[q]
        rpos = {d: i for i, d in enumerate(rdocs)}
        ppos = {d: i for i, d in enumerate(pdocs)}
        common = [d for d in pdocs if d in rpos]
        if common:
            ps = np.array([pscores[ppos[d]] for d in common], dtype=np.float64)
            rs = np.array([rscores[rpos[d]] for d in common], dtype=np.float64)
            diff = np.abs(rs - ps)
            worst = float(diff.max())
            out.worst_score_diff = max(out.worst_score_diff, worst)
            if worst > tau:
                i = int(diff.argmax())
                out.problems.append(f"query {q}: {common[i]} scores {float(rs[i])!r}, published {float(ps[i])!r} (difference {worst:.3g} > τ)")
            # Pairs in published order whose rebuilt order is reversed.
            rank_r = np.array([rpos[d] for d in common])
            inverted = np.triu(rank_r[:, None] > rank_r[None, :], k=1)
            if inverted.any():
                gaps = np.where(inverted, ps[:, None] - ps[None, :], -np.inf)
                out.swapped_pairs += int(inverted.sum())
                widest = float(gaps.max())
                out.widest_swap = max(out.widest_swap, widest)
                if widest >= tau:
                    i, j = np.unravel_index(int(gaps.argmax()), gaps.shape)
                    out.problems.append(
                        f"query {q}: {common[j]} now ranks above {common[i]}, whose published scores differ by {widest:.3g} >= τ "
                        f"({float(ps[i])!r} vs {float(ps[j])!r}): not a tie"
                    )
        for d in pdocs:
            if d not in rpos:
                s = float(pscores[ppos[d]])
                if len(rdocs) >= k and s <= float(rscores[-1]) + tau:
                    out.moved_across_cutoff += 1
                else:
                    out.problems.append(
                        f"query {q}: {d} (published score {s!r}) is not in the rebuilt top {len(rdocs)} "
                        f"(its last scores {float(rscores[-1]) if len(rdocs) else float('nan')!r})"
                    )
        last = float(pscores[-1]) if len(pscores) else -np.inf
        full = partial or len(pdocs) >= k
        for d in rdocs:
            if d not in ppos:
                s = float(rscores[rpos[d]])
                if partial and s <= last + tau:
                    continue  # below the probe's depth, or tied with its last document
                if full and s <= last + tau:
                    out.moved_across_cutoff += 1
                else:
                    where = "the probe's top" if partial else f"the published top {len(pdocs)}"
                    out.problems.append(f"query {q}: {d} (rebuilt score {s!r}, rank {rpos[d] + 1}) is not in {where} (its last scores {last!r})")
    return out


# --- metrics -------------------------------------------------------------------------------------

_UNJUDGED = {"least": -1e18, "most": 1e18}  # unjudged documents below every grade, or above it (the metrics that count them relevant)


def _clusters(scores: np.ndarray, tau: float) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive ranks whose neighbouring scores differ by less than ``tau``.

    A chain may hold two documents further apart than ``tau``; permuting the whole chain is a
    superset of the reorderings the rule allows, so the bounds below are conservative.
    """
    if not len(scores):
        return []
    cuts = np.flatnonzero((scores[:-1] - scores[1:]) >= tau) + 1
    edges = [0, *cuts.tolist(), len(scores)]
    return list(zip(edges[:-1], edges[1:]))


def tie_orderings(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    corpus_ids: list[str],
    tau: float,
    k: int,
    *,
    unjudged: str = "least",
    universe: dict[str, list[str]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rebuilt run with every tie within ``tau`` ordered most relevant first (best) and least relevant first (worst).

    Within each chain of ties documents are sorted by grade, unjudged ones counted as the least
    relevant (``unjudged="least"``: the metrics of the judged documents) or the most (``"most"``: the
    upper bounds that count every unjudged document relevant). The last chain of a full list (``k``
    documents) is open: a document of the query's universe the run did not retrieve (its candidate
    set in ``universe``, else ``corpus_ids``) may take a place in it, the most relevant in the best
    ordering, the least in the worst. Scores are replaced by strictly falling values (the scorer
    ranks by score), ranks by positions.
    """
    grades: dict[str, dict[str, float]] = {}
    for q, d, g in qrels.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("relevance").cast(pl.Float64)).iter_rows():
        grades.setdefault(q, {})[d] = g
    low = _UNJUDGED[unjudged]
    rows: dict[str, list[tuple[str, str, int]]] = {"best": [], "worst": []}
    for q, (docs, scores) in ranked_lists(run).items():
        g = grades.get(q, {})
        key = {d: g.get(d, low) for d in docs}
        best, worst = list(docs), list(docs)
        spans = _clusters(scores, tau)
        for n, (a, b) in enumerate(spans):
            part = docs[a:b]
            best[a:b] = sorted(part, key=lambda d: -key[d])
            worst[a:b] = sorted(part, key=lambda d: key[d])
            if n == len(spans) - 1 and len(docs) >= k:  # the open end of a full list
                retrieved = set(docs)
                pool = universe.get(q, []) if universe is not None else corpus_ids
                judged_in = [d for d in pool if d in g and d not in retrieved]
                unjudged_in = []
                for d in pool:  # as many unjudged, unretrieved documents as there are places
                    if len(unjudged_in) >= b - a:
                        break
                    if d not in retrieved and d not in g:
                        unjudged_in.append(d)
                key.update({d: g[d] for d in judged_in} | {d: low for d in unjudged_in})
                # Among equal grades the retrieved documents stay at best, the entering ones come in at worst.
                best[a:b] = sorted([*part, *judged_in, *unjudged_in], key=lambda d: -key[d])[: b - a]
                worst[a:b] = sorted([*unjudged_in, *judged_in, *part], key=lambda d: key[d])[: b - a]
        for name, order in (("best", best), ("worst", worst)):
            rows[name].extend((q, d, i + 1) for i, d in enumerate(order))

    def frame(r: list[tuple[str, str, int]]) -> pl.DataFrame:
        f = pl.DataFrame(r, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "rank": pl.Int32}, orient="row")
        return f.with_columns(score=(pl.lit(float(k + 1)) - pl.col("rank").cast(pl.Float64)))

    return frame(rows["best"]), frame(rows["worst"])


@dataclass
class MetricBounds:
    """Each metric's range over the tie reorderings, overall (``low``/``high``, flat keys) and per query."""

    low: dict[str, float]
    high: dict[str, float]
    per_query_low: pl.DataFrame
    per_query_high: pl.DataFrame
    tau: float
    results: tuple[dict[str, Any], ...] = ()  # the scorer's whole results (metrics.json) of each ordering
    ties_within_tau: dict[str, int] = field(default_factory=dict)  # metrics.json's "ties" counts where every tie within τ were exact

    def check_results(self, recorded: dict[str, Any], slack: float = METRIC_TOLERANCE) -> list[str]:
        """A recorded ``metrics.json`` against the bound: its metrics by :meth:`check`; each language's gap to the best
        language by interval arithmetic over the languages' bounds; the counts of queries with exactly tied scores
        between 0 and the queries whose run has a tie within τ (an exact tie is a float coincidence a tie within τ
        may or may not keep); every other number (hole counts, query counts) between the orderings' values;
        everything else (file lists, names) equal to theirs."""
        from medbench_core.evaluation.scoring import flat_metrics

        problems = self.check(flat_metrics(recorded), slack)[0]
        for lang, v in sorted(recorded.get("cross_lingual_gap", {}).items()):
            lo, hi = self.gap_bound(lang)
            if not (lo - slack <= float(v) <= hi + slack):
                problems.append(f"cross_lingual_gap.{lang}: recorded {v!r} outside [{lo!r}, {hi!r}]")
        if self.results:
            covered = {"mean", "ci", "breakdowns", "cross_lingual_gap", "tie_aware", "chance", "chance_corrected"}  # judged above
            computed = [{k: v for k, v in r.items() if k not in covered} for r in self.results]
            if "ties" in computed[0]:
                computed.append({**computed[0], "ties": {**computed[0]["ties"], **self.ties_within_tau}})
            problems += results_between({k: v for k, v in recorded.items() if k not in covered}, *computed, slack=slack)
        return problems

    def gap_bound(self, lang: str, metric: str = "ndcg_at_10") -> tuple[float, float]:
        """The range of ``cross_lingual_gap[lang]`` (the best language's ``metric`` minus ``lang``'s) over the tie reorderings."""
        langs = [k for k in self.low if k.startswith("language.") and k.endswith("." + metric)]
        mine = f"language.{lang}.{metric}"
        if not langs or mine not in self.low:
            return (math.nan, math.nan)
        return max(0.0, max(self.low[x] for x in langs) - self.high[mine]), max(self.high[x] for x in langs) - self.low[mine]

    def check(self, recorded: dict[str, float], slack: float) -> tuple[list[str], float, float]:
        """(problems, largest distance of a recorded metric from the bound, widest bound) for ``recorded``."""
        problems, outside, widest = [], 0.0, 0.0
        for key in sorted(recorded):
            v = float(recorded[key])
            if key not in self.low:
                problems.append(f"{key}: recorded {v!r}, not recomputed")
                continue
            lo, hi = self.low[key], self.high[key]
            widest = max(widest, hi - lo)
            if math.isnan(v) and math.isnan(lo):
                continue
            if not (lo - slack <= v <= hi + slack):
                out = lo - v if v < lo else v - hi
                outside = max(outside, out)
                problems.append(f"{key}: recorded {v!r} outside [{lo!r}, {hi!r}] (by {out:.3g})")
        for key in sorted(set(self.low) - set(recorded)):
            problems.append(f"{key}: recomputed, absent from the version")
        return problems, outside, widest


def _gap_bounds(low: dict[str, float], high: dict[str, float]) -> None:
    """``gap.language.L.m`` = best language's value minus L's: bounded by interval arithmetic over the languages."""
    for key in [k for k in low if k.startswith("gap.language.")]:
        lang, metric = key[len("gap.language.") :].rsplit(".", 1)[0], key.rsplit(".", 1)[1]
        langs = [k for k in low if k.startswith("language.") and k.endswith("." + metric)]
        mine = f"language.{lang}.{metric}"
        if not langs or mine not in low:
            continue
        low[key] = max(0.0, max(low[x] for x in langs) - high[mine])
        high[key] = max(high[x] for x in langs) - low[mine]


def metric_bounds(task: Any, run: pl.DataFrame, tau: float, k: int, work: Path) -> MetricBounds:
    """Score the tie orderings of ``run`` (:func:`tie_orderings`) with medbench's scorer; each metric's range.

    Every metric is monotone in moving a more relevant document before a less relevant one, where
    unjudged documents count as the least relevant (nDCG, recall, MAP, MRR, bpref, the lower bounds,
    the hole counts) or as the most (the upper bounds): the best and worst orderings of both kinds
    hold every allowed reordering between them, and the bootstrap draws the same resamples for all
    (seed 0), so every mean, CI bound and breakdown does too. A task with candidate sets draws the
    documents that may enter a full list from each query's own set.
    """
    from medbench_core.evaluation.scoring import flat_metrics, score

    universe = None
    if task.candidates is not None:
        universe = {}
        for q, d in task.candidates.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).iter_rows():
            universe.setdefault(q, []).append(d)
    corpus_ids = task.corpus.get_column("doc_id").cast(pl.Utf8).to_list()
    flat, per_query, results = [], [], []
    for unjudged in ("least", "most"):
        for name, frame in zip(("best", "worst"), tie_orderings(run, task.qrels, corpus_ids, tau, k, unjudged=unjudged, universe=universe)):
            out = Path(work) / f"{name}-unjudged-{unjudged}"
            out.mkdir(parents=True, exist_ok=True)
            results.append(score(task, frame, out))
            flat.append(flat_metrics(results[-1]))
            per_query.append(pl.read_parquet(out / "per_query.parquet"))
    low = {m: min(f[m] for f in flat) for m in flat[0]}
    high = {m: max(f[m] for f in flat) for m in flat[0]}
    _gap_bounds(low, high)
    every = pl.concat(per_query, how="vertical_relaxed")
    metrics = [c for c in every.columns if c != "query_id" and every.schema[c].is_numeric()]
    lo = every.group_by("query_id", maintain_order=True).agg(pl.col(metrics).min())
    hi = every.group_by("query_id", maintain_order=True).agg(pl.col(metrics).max())
    chains = [_clusters(scores, tau) for _, scores in ranked_lists(run).values()]
    tied = sum(any(b - a >= 2 for a, b in c) for c in chains)
    ties = {"queries_tied": tied, "queries_tie_continued": sum(bool(c) and c[-1][1] - c[-1][0] >= 2 for c in chains)}
    return MetricBounds(low, high, lo, hi, tau, tuple(results), ties)


def results_between(recorded: Any, *computed: Any, slack: float = METRIC_TOLERANCE, path: str = "") -> list[str]:
    """Where scorer results ``recorded`` (metrics.json) are not in the range of ``computed`` ones, leaf by leaf: numbers
    within ``slack`` of their range, anything else equal to every one. One ``computed``: the metrics rule where the run
    is identical."""
    if isinstance(recorded, dict) and all(isinstance(c, dict) for c in computed):
        if any(set(recorded) != set(c) for c in computed):
            return [f"{path or 'metrics.json'}: keys {sorted(recorded)}, recomputed {sorted(computed[0])}"]
        out = []
        for key in sorted(recorded):
            out += results_between(recorded[key], *(c[key] for c in computed), slack=slack, path=f"{path}.{key}" if path else key)
        return out
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (recorded, *computed)):
        lo, hi = min(computed), max(computed)
        if (math.isnan(recorded) and any(math.isnan(c) for c in computed)) or lo - slack <= recorded <= hi + slack:
            return []
        return [f"{path}: recorded {recorded!r} outside [{lo!r}, {hi!r}]" if hi != lo else f"{path}: recorded {recorded!r}, recomputed {lo!r}"]
    if isinstance(recorded, list) and all(isinstance(c, list) and len(c) == len(recorded) for c in computed):
        return [p for i, xs in enumerate(zip(recorded, *computed)) for p in results_between(*xs, slack=slack, path=f"{path}[{i}]")]
    return [] if all(recorded == c for c in computed) else [f"{path}: recorded {recorded!r}, recomputed {computed[0]!r}"]


def per_query_within(published: pl.DataFrame, bounds: MetricBounds, slack: float) -> list[str]:
    """Queries of a published per_query.parquet whose values lie outside their own tie bounds."""
    lo, hi = bounds.per_query_low, bounds.per_query_high
    metrics = [c for c in published.columns if c != "query_id" and c in lo.columns and published.schema[c].is_numeric()]
    joined = published.select("query_id", *metrics).join(lo.select("query_id", *metrics), on="query_id", how="left", suffix="_lo")
    joined = joined.join(hi.select("query_id", *metrics), on="query_id", how="left", suffix="_hi")
    problems = []
    for m in metrics:
        a, b = pl.min_horizontal(f"{m}_lo", f"{m}_hi"), pl.max_horizontal(f"{m}_lo", f"{m}_hi")
        bad = joined.filter((pl.col(m) < a - slack) | (pl.col(m) > b + slack) | a.is_null())
        for r in bad.head(3).iter_rows(named=True):
            problems.append(f"query {r['query_id']}: {m} published {r[m]!r} outside [{r[f'{m}_lo']!r}, {r[f'{m}_hi']!r}]")
    return problems
