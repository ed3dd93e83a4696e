"""The project's assets and checks over the real catalogue's partitions, by name, for tests that materialise them.

Partition keys come from the project's tasks.yaml (as `dagster dev` would load them); the task
entries behind them come from whatever catalogue a test's RegistryResource names.
"""

from pathlib import Path

import dagster as dg

from assets import build_assets
from assets.stage import STAGE_ASSETS
from runtime.partitions import Partitions

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = Partitions.from_catalog(ROOT / "tasks.yaml")
ASSETS, CHECKS = build_assets(PARTITIONS)
# The curated task's gates (the expansion's contract is a check of query_expansion).
task_checks = [c for c in CHECKS if {k.asset_key for k in c.check_keys} == {dg.AssetKey("curated_task")}]
BY_NAME = {a.key.to_user_string(): a for a in ASSETS if isinstance(a, dg.AssetsDefinition)}

curated_task = BY_NAME["curated_task"]
corpus_embeddings, corpus_index, retrieval_run, task_metrics = (BY_NAME[name] for name in STAGE_ASSETS)
leaderboard = BY_NAME["leaderboard"]
drift_canary = BY_NAME["drift_canary"]
