"""Names as MLflow takes them in metric and param keys: one rule for every key the product logs (issue 50, item 3).

MLflow accepts letters, digits, ``_ - . / :`` and spaces in metric and param names (``mlflow.utils.validation``;
it has no public function that makes a name acceptable); ``+``, ``@`` and the like are refused. Our metric keys keep
less than MLflow allows (no spaces or colons). No import of MLflow here: medbench_core does not import it.
"""

from __future__ import annotations

# What a name keeps (every other character becomes "_"):
PARAM_CHARS = "_-. /:"  # a param name: MLflow's whole rule
KEY_CHARS = "_-./"  # a metric key, "/" between its parts: ``<task>/<model>/mean``
PART_CHARS = "_-."  # one part of a key, where a "/" of a model name must not start another: ``p_perm.vs_<model>.ndcg_at_10``


def mlflow_name(text: object, keep: str = KEY_CHARS) -> str:
    """``text`` with every character that is not a letter, a digit or one of ``keep`` replaced by ``_``:
    ``mlflow_name("scifact/bm25+rm3") == "scifact/bm25_rm3"``."""
    return "".join(ch if ch.isalnum() or ch in keep else "_" for ch in str(text))
