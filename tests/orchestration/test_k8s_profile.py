"""The Kubernetes profile (deploy/k8s/dagster.yaml, MEDBENCH_EXECUTOR=k8s) loads, without a cluster.

The instance config validates against Dagster's schema; the K8sRunLauncher it names and the step
executor MEDBENCH_EXECUTOR=k8s selects (dagster-k8s' k8s_job_executor) both construct against a
dummy kubeconfig whose API server does not exist: construction reads the kubeconfig and builds
clients, and contacts nothing (a request would fail: nothing listens on that port).
"""

import shutil
from pathlib import Path

import dagster as dg
import yaml

from tests.orchestration.operating_env import ROOT, free_port

K8S_YAML = ROOT / "deploy" / "k8s" / "dagster.yaml"
ENV = {
    "DAGSTER_PG_HOST": "db.internal",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "pw",
    "MEDBENCH_K8S_NAMESPACE": "medbench",
    "MEDBENCH_IMAGE": "registry.internal/medbench:abc123",
}


def dummy_kubeconfig(path: Path) -> str:
    server = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "dummy", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "dummy", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "dummy", "context": {"cluster": "dummy", "user": "dummy", "namespace": "medbench"}}],
                "current-context": "dummy",
            }
        )
    )
    return server


def test_the_k8s_instance_config_validates(tmp_path, monkeypatch):
    from dagster._core.instance.config import dagster_instance_config

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    shutil.copy(K8S_YAML, tmp_path / "dagster.yaml")
    config, custom_class = dagster_instance_config(str(tmp_path))
    assert custom_class is None
    assert config["run_launcher"]["module"] == "dagster_k8s" and config["run_launcher"]["class"] == "K8sRunLauncher"
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["storage"]["postgres"]["postgres_db"]["scheme"] == "postgresql+psycopg2"
    # Every env var the file reads is one of the documented ones (deploy/k8s/README.md).
    assert env_vars_read(yaml.safe_load(K8S_YAML.read_text())) == set(ENV)


def env_vars_read(node) -> set[str]:
    """Names in every ``{env: NAME}`` of a loaded YAML tree."""
    if isinstance(node, dict):
        if set(node) == {"env"}:
            return {node["env"]}
        return set().union(*(env_vars_read(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(env_vars_read(v) for v in node))
    return set()


def test_the_run_launcher_and_the_step_executor_construct_against_a_dummy_kubeconfig(tmp_path, monkeypatch):
    from dagster._config import process_config
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.executor.init import InitExecutorContext
    from dagster_k8s import K8sRunLauncher
    from dagster_k8s.executor import K8sStepHandler

    from orchestration import definitions
    from runtime import settings

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    kubeconfig = tmp_path / "kubeconfig"
    server = dummy_kubeconfig(kubeconfig)

    raw = yaml.safe_load(K8S_YAML.read_text())["run_launcher"]["config"]
    raw.update(load_incluster_config=False, kubeconfig_file=str(kubeconfig))  # outside the cluster
    processed = process_config(K8sRunLauncher.config_type(), raw)
    assert processed.success, processed.errors
    launcher = K8sRunLauncher.from_config_value(None, processed.value)
    assert launcher.job_image == ENV["MEDBENCH_IMAGE"] and launcher.job_namespace == "medbench"
    assert launcher.instance_config_map == "dagster-instance"
    assert [v["name"] for v in launcher.volumes] == ["medbench-data"] and launcher.volume_mounts[0]["mountPath"] == "/mnt/medbench"
    assert launcher.resources["requests"]["memory"] == "8Gi"
    assert launcher._api_client.batch_api.api_client.configuration.host == server  # noqa: SLF001 (read from the kubeconfig)

    monkeypatch.setattr(settings, "EXECUTOR", "k8s")
    executor_def = definitions.executor()
    exec_config = process_config(
        executor_def.config_schema.config_type,
        {"load_incluster_config": False, "kubeconfig_file": str(kubeconfig), "job_image": ENV["MEDBENCH_IMAGE"], "max_concurrent": 4},
    )
    assert exec_config.success, exec_config.errors

    @dg.op
    def noop():
        return 1

    @dg.job(executor_def=executor_def)
    def one_step():
        noop()

    executor = executor_def.executor_creation_fn(InitExecutorContext(InMemoryJob(one_step), executor_def, exec_config.value, dg.DagsterInstance.ephemeral()))
    assert type(executor).__name__ == "StepDelegatingExecutor"
    handler = executor._step_handler  # noqa: SLF001
    assert isinstance(handler, K8sStepHandler) and handler._executor_image == ENV["MEDBENCH_IMAGE"]  # noqa: SLF001
    assert handler._kubeconfig_file == str(kubeconfig)  # noqa: SLF001
    assert handler._api_client.batch_api.api_client.configuration.host == server  # noqa: SLF001
    assert executor._max_concurrent == 4  # noqa: SLF001
