"""``medbench models sync|retire``: the model partitions in step with models.yaml, or one dropped on purpose.

A model added to models.yaml becomes a partition (the registry sensor and ``medbench run`` do
this too); a removed one keeps its partition, history, MLflow runs and artifacts until retired.
``sync`` also resolves each hub model's revision (a branch such as ``main``) to the commit sha it
names now and records it, without rewriting models.yaml (see orchestration/registry_sync.py).
"""

from __future__ import annotations

import argparse

from medbench_cli.common import add_command, describe


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="sync the model partitions with models.yaml, or retire a removed model", description=describe(__doc__))
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = add_command(actions, "sync", "add every registered model as a partition; record changed entries (their partitions turn stale)")
    s.set_defaults(handler=sync)
    r = add_command(actions, "retire", "delete the partition of a model removed from models.yaml (history, MLflow runs, artifacts kept)")
    r.add_argument("names", nargs="+", metavar="NAME", help="a model no longer in models.yaml")
    r.set_defaults(handler=retire, parser=r)


def _instance_and_registry():
    import dagster as dg

    from medbench_cli.common import prepare_environment
    from orchestration.definitions import default_resources

    prepare_environment()
    return dg.DagsterInstance.get(), default_resources()["registry"]


def sync(args: argparse.Namespace) -> int:
    from orchestration.registry_sync import pin_revisions, sync_model_partitions

    instance, registry = _instance_and_registry()
    pins = pin_revisions(registry)
    print(f"added: {', '.join(sync_model_partitions(instance, registry, pins)) or 'none'}")
    if pins:
        where = "the hub" if registry.online else "the local hub cache (MEDBENCH_ONLINE=1 asks the hub)"
        print(f"hub revisions, resolved by {where}; recorded in the model_spec observations and each run's MLflow params, models.yaml unchanged:")
        for pin in pins.values():
            print(f"  {pin.describe()}")
    return 0


def retire(args: argparse.Namespace) -> int:
    from orchestration.registry_sync import retire_model

    instance, registry = _instance_and_registry()
    for name in args.names:
        try:
            retire_model(instance, registry, name)
        except ValueError as exc:
            args.parser.error(str(exc))  # exit code 2
        print(f"retired {name}: partition deleted; history, MLflow runs and artifacts kept")
    return 0
