"""The per-query kernels of the retrieval metrics, one function per metric family (registered in
:data:`medbench_core.evaluation.metrics.METRICS`).

Each takes, for every judged query, its top-k ``gains`` (relevance grades of the ranked documents,
in rank order, 0 for unjudged), the ``ideal`` gains (the judged grades sorted descending), the
number of relevant documents ``n_rel`` and the rank ``discount`` (log2(i + 1)); it returns one
value per query. Sums run left to right (``np.cumsum``) so values equal trec_eval's to the last bit.
"""

from __future__ import annotations

import numpy as np


def ndcg(gains: np.ndarray, ideal: np.ndarray, n_rel: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """DCG@k / IDCG@k (trec_eval ``ndcg_cut``); 0 when IDCG is 0."""
    # Row-wise cumsum adds left to right, as the scalar loop did; + 0.0 terms change no bit.
    dcg = np.cumsum(gains / discount, axis=1)[:, -1]
    idcg = np.cumsum(ideal / discount, axis=1)[:, -1]
    return np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg != 0)


def recall(gains: np.ndarray, ideal: np.ndarray, n_rel: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """|relevant in top k| / |relevant| (relevant: grade >= 1)."""
    return np.divide((gains >= 1).sum(axis=1), n_rel, out=np.zeros(len(n_rel)), where=n_rel != 0)


def mrr(gains: np.ndarray, ideal: np.ndarray, n_rel: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """1 / rank of the first relevant document within the top k, else 0."""
    relevant = gains >= 1
    first = relevant.argmax(axis=1)
    return np.where(relevant.any(axis=1), 1.0 / (first + 1), 0.0)


def average_precision(gains: np.ndarray, ideal: np.ndarray, n_rel: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """(sum over relevant d_i with i <= k of precision@i) / |relevant| (trec_eval ``map_cut``)."""
    relevant = gains >= 1
    precision = np.cumsum(relevant, axis=1) / np.arange(1, gains.shape[1] + 1)
    total = np.cumsum(np.where(relevant, precision, 0.0), axis=1)[:, -1]
    return np.divide(total, n_rel, out=np.zeros(len(n_rel)), where=n_rel != 0)


def hit_rate(gains: np.ndarray, ideal: np.ndarray, n_rel: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """1 when any relevant document is in the top k, else 0 (trec_eval ``success``; UniIR's "Recall@k").

    UniIR's ``compute_recall_at_k`` (github.com/TIGER-AI-Lab/UniIR at 98dc570,
    ``src/common/mbeir_retriever.py`` l.149-166): 0 without relevant documents, else 1 when the set
    of the top k retrieved intersects the relevant set; relevant means a positive grade
    (``load_qrel`` keeps ``relevance_score > 0``).
    """
    return (gains >= 1).any(axis=1).astype(np.float64)
