"""The leaf layer under the assets: settings, resources (artifact store, registry, compute, MLflow) and partitions.

Assets import ``runtime.resources`` and ``runtime.partitions`` (and medbench_core), never
``runtime.settings``: the environment reaches them through the resources that
orchestration/definitions.py configures from the settings.
"""
