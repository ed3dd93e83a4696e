"""LLM relevance judgements as a qrels layer (issue 33), a stage designed like the query expansions.

Per (judgement x task), beside the human qrels, which stay as they are:

- :mod:`~medbench_core.evaluation.judging.spec`: the ``judgements:`` entries of ``models.yaml``, grade
  mappings and provenance keys;
- :mod:`~medbench_core.evaluation.judging.pool`: what to judge (the holes in the top k of chosen
  models' runs) and a calibration sample of human-judged pairs;
- :mod:`~medbench_core.evaluation.judging.prompt`: UMBRELA's 0-3 prompt and the constrained grade parsing;
- :mod:`~medbench_core.evaluation.judging.judge`: a local causal LM through transformers, batched,
  constrained to the grade tokens, with a pair cache;
- :mod:`~medbench_core.evaluation.judging.files`: judgements made elsewhere (TREC qrels, UMBRELA's JSONL);
- :mod:`~medbench_core.evaluation.judging.frame`: the artifact (every judged pair, the LLM qrels);
- :mod:`~medbench_core.evaluation.judging.stage`: key and build of one (judgement x task);
- :mod:`~medbench_core.evaluation.judging.layers`: the filled layer (human + LLM) and a run scored on it;
- :mod:`~medbench_core.evaluation.judging.agreement`: weighted kappa, Krippendorff's alpha, Kendall's
  tau, rank-biased overlap, moved rank intervals;
- :mod:`~medbench_core.evaluation.judging.circularity`: cells built with the judge's own family.

Importing this package imports neither torch nor transformers (they load when a judge does).
"""

from medbench_core.evaluation.judging.spec import JudgementSpec, find_judgement, load_judgements, parse_judgements

__all__ = ["JudgementSpec", "find_judgement", "load_judgements", "parse_judgements"]
