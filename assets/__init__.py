"""Dagster assets, one module per stage; they import medbench_core and the runtime layer only.

:func:`build_assets` makes every asset and check over a catalogue's partitions (nothing is read
at import). The four model x task stages (embeddings, indices, runs, metrics) are one factory
over their :class:`assets.stage.Stage` each; the query expansion (assets/expansions.py) feeds the runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

    from runtime.partitions import Partitions


def build_assets(partitions: Partitions) -> tuple[list[dg.AssetsDefinition | dg.AssetSpec], list[dg.AssetChecksDefinition]]:
    """Every asset (in lineage order) and asset check over ``partitions``."""
    from assets import canary, checks, contamination, embeddings, expansions, indices, judgements, metrics, registry, reports, runs, tasks
    from assets.stage import stage_asset
    from medbench_core.layout import STAGES

    own = {m.STAGE.name: m.STAGE for m in (embeddings, indices, runs, metrics)}
    stages = [stage_asset(own[name], partitions) for name in STAGES]
    expansion, expansion_check = expansions.build_query_expansion(partitions)
    assets = [registry.model_spec, tasks.build_curated_task(partitions), expansion, *stages, judgements.build_relevance_judgements(partitions),
              contamination.build_contamination_audit(partitions), reports.leaderboard, canary.drift_canary]  # fmt: skip
    return assets, [*checks.build_task_checks(partitions.tasks), expansion_check]
