"""A `medbench` command started with none of the hub libraries' offline switches set keeps them offline by itself
(medbench_cli/common.py's prepare_environment, before any of them is imported).

The suite's other commands cannot show it: the commands forked from tests/forked.py's zygote share its
imports, done with the offline switches that the harness (and scripts/setup.sh) set beforehand. This one
runs as a real process whose environment has none; it runs in the real-process lane of scripts/test
(``MEDBENCH_TEST_FORK=0``), where the switches are unset for the whole session.
"""

from __future__ import annotations

import pytest

from tests import forked
from tests.cli.command import state_env
from tests.core.hf_layouts import hub_cache
from tests.orchestration.operating_env import BM25, new_world
from tests.orchestration.test_registry_pins import HUB_ID, HUBBY, SHA, write_config

SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")

# In the command's process: at its exit, what huggingface_hub read from the environment when it was imported.
REPORT_AT_EXIT = """
import atexit, sys
def _offline():
    constants = sys.modules.get("huggingface_hub.constants")
    print("huggingface_hub imported offline:", None if constants is None else constants.HF_HUB_OFFLINE, flush=True)
atexit.register(_offline)
"""


@pytest.mark.skipif(forked.forking(), reason="the real-process lane of scripts/test runs it (MEDBENCH_TEST_FORK=0, no offline switches)")
def test_a_command_started_without_the_offline_switches_imports_the_hub_library_offline(tmp_path):
    world = new_world(tmp_path / "w", [BM25, HUBBY])
    cache, _ = hub_cache(tmp_path / "hub", HUB_ID, write_config, sha=SHA, repo_type="model")
    env = {k: v for k, v in forked.base_env().items() if k not in SWITCHES}
    env |= {**state_env(tmp_path), "DAGSTER_HOME": str(world.dagster_home), "MEDBENCH_MODELS": str(world.models_file)}
    env |= {"MEDBENCH_TASKS": str(world.root / "tasks.yaml"), "HF_HUB_CACHE": str(cache)}
    runner = forked.Spawned(tmp_path / "out", prelude=REPORT_AT_EXIT)
    runner.submit("medbench_cli", "models", "sync", env=env)
    rc, said = runner.result(timeout=300), runner.out.read_text()
    assert rc == 0, said[-3000:]
    assert f"  hubby: {HUB_ID}@main -> {SHA}" in said  # pinned from the local hub cache, which it read ...
    assert said.rstrip().splitlines()[-1] == "huggingface_hub imported offline: True"  # ... with the library offline
