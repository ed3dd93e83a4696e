"""The ``medbench`` command line: run, ui, models, leaderboard, export, release, reproduce, gc, data.

Each subcommand is a module with ``add_parser(subparsers)``; heavy imports (Dagster, MLflow,
DVC) happen inside the handlers, so ``medbench --help`` and name validation take no time.
"""
