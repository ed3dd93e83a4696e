"""MEDBENCH_ONLINE: off by default; on, the resources carry it (datasets, encoders, revision pinning) and
scripts/setup.sh no longer sets the HF_*_OFFLINE switches that would make huggingface_hub refuse."""

import os
import subprocess
import sys

import pytest

from tests.orchestration.operating_env import ROOT

PROBE = (
    "from orchestration.definitions import default_resources; from runtime import settings; r = default_resources(); "
    "print(settings.ONLINE, r['registry'].online, r['compute'].online)"
)


@pytest.mark.parametrize("value, expected", [(None, "False False False"), ("0", "False False False"), ("1", "True True True"), ("true", "True True True")])
def test_the_switch_reaches_the_resources(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "MEDBENCH_ONLINE"} | {"PYTHONPATH": str(ROOT)}
    if value is not None:
        env["MEDBENCH_ONLINE"] = value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == expected, out.stderr[-2000:]


@pytest.mark.parametrize("value, expected", [("", "1 1 1"), ("1", "unset unset unset")])
def test_setup_keeps_the_hub_offline_unless_online(value, expected):
    script = (
        f"export MEDBENCH_ONLINE={value}; export HF_HUB_OFFLINE=1; source {ROOT}/scripts/setup.sh >/dev/null 2>&1; "
        'echo "${HF_HUB_OFFLINE-unset} ${TRANSFORMERS_OFFLINE-unset} ${HF_DATASETS_OFFLINE-unset}"'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == expected, out.stderr[-2000:]
