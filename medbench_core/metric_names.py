"""The names of the metrics every run computes.

Below taskdata, retrieval and evaluation (docs/architecture.md, "Inside medbench_core"): the list
enters the metrics stage's key (retrieval's kinds compute it) and the MTEB catalogue checks a
task's main score against it (taskdata), while the metrics themselves are computed in
:mod:`medbench_core.evaluation.metrics`.
"""

# trec_eval's measures (checked against pytrec_eval-terrier) and what a cell rests on when ranked
# documents are unjudged (issue 33; checked against ir_measures): judged share and holes of the top 10,
# bpref, the condensed list and the bounds on nDCG@10 over every completion of the judgments.
TREC_METRICS = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_100")
HOLE_METRICS = ("judged_at_10", "holes_at_10", "bpref_at_100", "ndcg_condensed_at_10", "ndcg_lower_at_10", "ndcg_upper_at_10")
DEFAULT_METRICS = (*TREC_METRICS, *HOLE_METRICS)
