"""Benchmark versions with DVC and git: release one, reproduce one, collect garbage without losing one.

No Dagster here: a version is a git tag plus the DVC hash of ``data/``. Modules by concern:
``vcs`` (git and dvc subprocesses, the data hash, the records), ``remote`` (the DVC remote, a
complete push), ``workspace`` (a pull staged and swapped into data/, never losing what it held),
``release``, ``reproduce``, ``record`` and ``compare`` (the version file, a rebuild judged against
it), ``tolerance`` (the one rule for artifacts of floating-point work), ``rebuild``, ``gc`` (garbage
collection and cache checks). The
command line is ``medbench release|reproduce|gc`` and ``medbench data remote|pull|push|check``
(medbench_cli/versions.py); it passes in what the environment says (MEDBENCH_DVC_REMOTE, the MLflow URI).
"""
