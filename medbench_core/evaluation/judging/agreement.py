"""Agreement between the human and the LLM qrels layers, and between the rankings they give.

On the pairs both sources graded (the calibration pairs, on the task's scale):

- **Cohen's weighted kappa**, quadratic weights over the task's grades 0..top:
  ``1 - sum(w * O) / sum(w * E)``, O the observed and E the chance (product of marginals) joint
  proportions, ``w_ij = (i - j)^2`` (sklearn's ``cohen_kappa_score(weights="quadratic", labels=...)``).
- **Krippendorff's alpha**, ordinal level, two coders, no missing values:
  ``1 - (n - 1) * sum(o_ck d_ck) / sum(n_c n_k d_ck)`` over the coincidence matrix o (each pair
  counted both ways), n the pairable values, ``d_ck = (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2``
  (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability"; the ``krippendorff`` package's
  ordinal metric).
- Their **95% CIs**: percentile bootstrap over the pairs (``numpy.random.default_rng(seed)``,
  ``n_resamples`` draws; resamples where the statistic is undefined, all one grade, are left out
  and counted).

Between the system rankings by mean nDCG@10 under the human and the filled layers (models
ordered by mean, ties by name):

- **Kendall's tau-b** (``scipy.stats.kendalltau``);
- **rank-biased overlap**, extrapolated (Webber, Moffat & Zobel, TOIS 2010, eq. 32),
  ``RBO_ext = X_k/k * p^k + (1 - p)/p * sum_{d=1..k} X_d/d * p^d``, X_d the overlap of the two
  top-d lists, p = 0.9 (the top 10 ranks carry about 86% of the weight);
- the cells whose **rank interval** (the leaderboard's 95% bootstrap interval of the rank) is not
  the same under both layers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

DEFAULT_RESAMPLES = 2_000
DEFAULT_SEED = 0
RBO_P = 0.9


def weighted_kappa(a: Sequence[int], b: Sequence[int], labels: Sequence[int], weights: str = "quadratic") -> float:
    """Cohen's weighted kappa of two gradings of the same items over ``labels`` (module docstring); nan when undefined."""
    index = {g: i for i, g in enumerate(labels)}
    n = len(labels)
    conf = np.zeros((n, n), dtype=np.float64)
    np.add.at(
        conf, (np.array([index[x] for x in np.asarray(a).tolist()], dtype=np.intp), np.array([index[x] for x in np.asarray(b).tolist()], dtype=np.intp)), 1.0
    )
    expected = np.outer(conf.sum(axis=1), conf.sum(axis=0)) / conf.sum()
    i, j = np.indices((n, n))
    w = np.abs(i - j) if weights == "linear" else (i - j) ** 2
    den = np.sum(w * expected)
    return float(1.0 - np.sum(w * conf) / den) if den else float("nan")


def krippendorff_alpha_ordinal(a: Sequence[int], b: Sequence[int]) -> float:
    """Krippendorff's alpha, ordinal, of two coders who both graded every item (module docstring); nan when undefined."""
    values = np.concatenate([np.asarray(a), np.asarray(b)])
    domain = np.unique(values)
    if len(domain) < 2:
        return float("nan")
    index = {v: i for i, v in enumerate(domain.tolist())}
    m = len(domain)
    o = np.zeros((m, m), dtype=np.float64)
    ia = np.array([index[x] for x in np.asarray(a).tolist()], dtype=np.intp)
    ib = np.array([index[y] for y in np.asarray(b).tolist()], dtype=np.intp)
    np.add.at(o, (ia, ib), 1.0)  # two coders per unit: each pair once each way, weight 1 / (2 - 1)
    np.add.at(o, (ib, ia), 1.0)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    cum = np.cumsum(n_c)
    d = np.zeros((m, m))
    for c in range(m):
        for k in range(m):
            lo, hi = min(c, k), max(c, k)
            between = cum[hi] - (cum[lo - 1] if lo > 0 else 0.0)
            d[c, k] = (between - (n_c[c] + n_c[k]) / 2.0) ** 2
    expected = np.sum(np.outer(n_c, n_c) * d)
    return float(1.0 - (n - 1) * np.sum(o * d) / expected) if expected else float("nan")


def bootstrap_interval(
    stat: Callable[[np.ndarray, np.ndarray], float], a: Sequence[int], b: Sequence[int], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> tuple[float | None, float | None, int]:
    """Percentile 95% CI of ``stat(a, b)`` over resampled pairs, and how many resamples were defined."""
    a, b = np.asarray(a), np.asarray(b)
    if len(a) < 2:
        return None, None, 0
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(a), size=(n_resamples, len(a)))
    vals = np.array([stat(a[i], b[i]) for i in draws])
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return None, None, 0
    lo, hi = np.quantile(vals, [0.025, 0.975])
    return float(lo), float(hi), int(len(vals))


def pair_agreement(human: Sequence[int], llm: Sequence[int], labels: Sequence[int], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict:
    """Weighted kappa and Krippendorff's alpha (ordinal) of the pairs both graded, with 95% bootstrap CIs,
    the share of exact matches and the confusion matrix (rows: human grade, columns: LLM grade).

    A pair with a negative grade on either side is not graded (trec_eval: in the pool, unjudged):
    left out and counted (``n_unjudged``). Any other grade outside ``labels`` is refused."""
    pairs = [(int(h), int(m)) for h, m in zip(human, llm)]
    labels = list(labels)
    graded = [(h, m) for h, m in pairs if h >= 0 and m >= 0]
    outside = sorted({g for pair in graded for g in pair} - set(labels))
    if outside:
        raise ValueError(f"grade(s) {outside} are not on the scale {labels}; map the judge's grades onto the task's (grade_map)")
    human, llm = [h for h, _ in graded], [m for _, m in graded]
    if not human:
        return {"n_pairs": 0, "n_unjudged": len(pairs)}
    kappa = weighted_kappa(human, llm, labels)
    alpha = krippendorff_alpha_ordinal(human, llm)
    k_lo, k_hi, k_n = bootstrap_interval(lambda x, y: weighted_kappa(x, y, labels), human, llm, n_resamples=n_resamples, seed=seed)
    a_lo, a_hi, a_n = bootstrap_interval(krippendorff_alpha_ordinal, human, llm, n_resamples=n_resamples, seed=seed)
    conf = [[sum(1 for h, m in zip(human, llm) if h == gh and m == gm) for gm in labels] for gh in labels]
    return {
        "n_pairs": len(human), "n_unjudged": len(pairs) - len(human), "labels": labels, "exact": float(np.mean(np.equal(human, llm))),
        "kappa_quadratic": None if np.isnan(kappa) else kappa, "kappa_ci": [k_lo, k_hi], "kappa_resamples": k_n,
        "alpha_ordinal": None if np.isnan(alpha) else alpha, "alpha_ci": [a_lo, a_hi], "alpha_resamples": a_n,
        "confusion": conf, "bootstrap": {"resamples": n_resamples, "seed": seed},
    }  # fmt: skip


def system_order(means: Mapping[str, float]) -> list[str]:
    """Models best first by mean, ties by name."""
    return sorted(means, key=lambda m: (-means[m], m))


def rbo_ext(a: Sequence[str], b: Sequence[str], p: float = RBO_P) -> float:
    """Extrapolated rank-biased overlap of two rankings of the same length (module docstring)."""
    k = min(len(a), len(b))
    if k == 0:
        return float("nan")
    seen_a: set[str] = set()
    seen_b: set[str] = set()
    overlap, total = 0, 0.0
    for d in range(1, k + 1):
        x, y = a[d - 1], b[d - 1]
        overlap += (x in seen_b) + (y in seen_a) + (x == y)
        seen_a.add(x)
        seen_b.add(y)
        total += overlap / d * p**d
    return float(overlap / k * p**k + (1 - p) / p * total)


def ranking_agreement(human: Mapping[str, float], filled: Mapping[str, float], p: float = RBO_P) -> dict:
    """Kendall's tau-b and RBO_ext between the system rankings of one task under the two layers (same models)."""
    from scipy.stats import kendalltau

    models = sorted(set(human) & set(filled))
    out = {"models": len(models), "order_human": system_order({m: human[m] for m in models}), "order_filled": system_order({m: filled[m] for m in models})}
    if len(models) < 2:
        return out | {"kendall_tau": None, "rbo": None}
    tau = kendalltau([human[m] for m in models], [filled[m] for m in models]).statistic
    return out | {"kendall_tau": None if np.isnan(tau) else float(tau), "rbo": rbo_ext(out["order_human"], out["order_filled"], p), "rbo_p": p}


def moved_intervals(human: Sequence[Mapping], filled: Sequence[Mapping]) -> list[dict]:
    """The cells (task, model) whose rank or 95% rank interval differs between the layers' rank tables."""
    after = {(r["task"], r["model"]): r for r in filled}
    out = []
    for r in human:
        f = after.get((r["task"], r["model"]))
        if f is None:
            continue
        if (r["rank"], r["rank_low"], r["rank_high"]) != (f["rank"], f["rank_low"], f["rank_high"]):
            out.append(
                {
                    "task": r["task"],
                    "model": r["model"],
                    "human": [r["rank"], r["rank_low"], r["rank_high"]],
                    "filled": [f["rank"], f["rank_low"], f["rank_high"]],
                }
            )
    return out
