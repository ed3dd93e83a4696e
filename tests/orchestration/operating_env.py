"""A small operated medbench for the orchestration tests: two tiny BEIR tasks, BM25 models, a tmp instance.

The task names are real partition keys (scifact, liveqa_medquad, from tasks.yaml); the data behind
them is written here, a few medical sentences each, so that curating and scoring take a second.
Everything lives under one folder: source data, curated data, MLflow, DAGSTER_HOME (with the
project's dagster.yaml). ``World.copy_to`` clones a built world for a test that changes it.
"""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}

SCI_DOCS = {
    "s1": "Aspirin lowers the risk of a second heart attack in adults with coronary disease.",
    "s2": "Vitamin D supplements did not reduce fractures in older women.",
    "s3": "Statins reduce LDL cholesterol and cardiovascular events.",
    "s4": "Metformin improves glycaemic control in type 2 diabetes.",
    "s5": "Regular exercise lowers resting blood pressure.",
}
SCI_QUERIES = {"q1": "aspirin prevents heart attack", "q2": "statins lower cholesterol", "q3": "vitamin D prevents fractures"}
SCI_QRELS = [("q1", "s1", 1), ("q2", "s3", 1), ("q3", "s2", 1)]
LQ_DOCS = {
    "a1": "Gout is a form of arthritis caused by uric acid crystals in the joints.",
    "a2": "Shingles is a painful rash caused by the varicella zoster virus.",
    "a3": "Migraine headaches can be treated with triptans and rest in a dark room.",
    "a4": "Iron deficiency anaemia causes tiredness and pale skin.",
    "a5": "Asthma inhalers relax the muscles around the airways.",
}
LQ_QUERIES = {"1": "what causes gout in the joints", "2": "how is a migraine treated", "3": "why am I tired all the time, is it anaemia"}
LQ_QRELS = [("1", "a1", 2), ("2", "a3", 3), ("3", "a4", 1)]

BM25 = {
    "name": "bm25",
    "kind": "bm25",
    "revision": "bm25s-lucene",
    "settings": {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"},
}
BM25_K12 = {**BM25, "name": "bm25-k12", "settings": {**BM25["settings"], "k1": 1.2}}


def write_beir(folder: Path, queries: dict, docs: dict, qrels: list) -> None:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels))


def write_models(path: Path, models: list[dict]) -> None:
    path.write_text(json.dumps({"models": models}, indent=1))  # JSON is YAML


@dataclass
class World:
    root: Path

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    @property
    def models_file(self) -> Path:
        return self.root / "models.yaml"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    def resources(self) -> dict:
        from runtime.resources import ArtifactStoreResource, ComputeResource, MLflowResource, RegistryResource

        return {
            "store": ArtifactStoreResource(root=str(self.root / "data"), shared_data=str(self.shared), scratch=str(self.root / "scratch")),
            "registry": RegistryResource(models_file=str(self.models_file), tasks_file=str(self.root / "tasks.yaml")),
            "compute": ComputeResource(device="cpu"),
            "mlflow": MLflowResource(tracking_uri=f"sqlite:///{self.root / 'mlflow.db'}", artifact_root=str(self.root / "mlartifacts")),
        }

    def defs(self) -> dg.Definitions:
        from orchestration.definitions import build_definitions

        return build_definitions(resources=self.resources())

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.dagster_home))

    def copy_to(self, dest: Path) -> "World":
        shutil.copytree(self.root, dest)
        return World(dest)


def new_world(root: Path, models: list[dict], real_data: bool = False) -> World:
    """Source data, catalogue, registry and an empty instance with the project's dagster.yaml.

    With ``real_data`` the source data is ../shared/data and the catalogue the project's tasks.yaml.
    """
    root.mkdir(parents=True, exist_ok=True)
    if real_data:
        from runtime import settings

        (root / "shared").symlink_to(settings.SHARED / "data")
        shutil.copy(ROOT / "tasks.yaml", root / "tasks.yaml")
    else:
        write_beir(root / "shared" / "sci", SCI_QUERIES, SCI_DOCS, SCI_QRELS)
        write_beir(root / "shared" / "lq", LQ_QUERIES, LQ_DOCS, LQ_QRELS)
        _write_tiny_catalogue(root / "tasks.yaml")
    write_models(root / "models.yaml", models)
    world = World(root)
    world.dagster_home.mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", world.dagster_home / "dagster.yaml")
    world.resources()["mlflow"].ensure_store()
    return world


def _write_tiny_catalogue(path: Path) -> None:
    path.write_text(
        "benchmark: medbench-test\n"
        "licence_allowlist: [CC-BY-4.0, ODC-By-1.0]\n"
        "tasks:\n"
        "  - {name: scifact, reader: beir, path: sci, split: test, query_licence: CC-BY-4.0, doc_licence: ODC-By-1.0}\n"
        "  - {name: liveqa_medquad, reader: beir, path: lq, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}\n"
    )


def curate(world: World, instance: dg.DagsterInstance, defs: dg.Definitions, tasks: list[str]) -> None:
    """Curate ``tasks`` with their contract check, then the cross-task overlap check."""
    for task in tasks:
        res = defs.resolve_job_def("curate_tasks").execute_in_process(instance=instance, partition_key=task, run_config=QUIET, raise_on_error=False)
        assert res.success, f"curate {task} failed"
    assert defs.resolve_job_def("check_overlap").execute_in_process(instance=instance, run_config=QUIET, raise_on_error=False).success


def evaluate(instance: dg.DagsterInstance, defs: dg.Definitions, partition_key, tags: dict | None = None) -> dg.ExecuteInProcessResult:
    res = defs.resolve_job_def("evaluate_partition").execute_in_process(
        instance=instance, partition_key=partition_key, run_config=QUIET, tags=tags or {}, raise_on_error=False
    )
    assert res.success, f"evaluate {partition_key} failed"
    return res


def apply_sensor_result(instance: dg.DagsterInstance, defs: dg.Definitions, result: dg.SensorResult) -> list[dg.ExecuteInProcessResult]:
    """What the sensor daemon does with a result, in its order: asset events, new partitions, then the runs."""
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return [evaluate(instance, defs, r.partition_key, r.tags) for r in result.run_requests]


def materialization_ids(instance: dg.DagsterInstance, asset: str) -> dict[str, int]:
    """Storage id of the latest materialisation of each partition of ``asset``."""
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
    out: dict[str, int] = {}
    for r in sorted(records, key=lambda r: r.storage_id):
        out[r.partition_key] = r.storage_id
    return out


def data_version(instance: dg.DagsterInstance, asset: str, partition: str) -> str:
    """Data version of the latest materialisation of ``asset[partition]``."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
    return records[0].event_log_entry.asset_materialization.tags["dagster/data_version"]


_TEMPLATES: dict[str, World] = {}


def operated_world(tmp_path_factory, models: tuple[str, ...] = ("bm25", "bm25-k12")) -> World:
    """A world where both tasks are curated and ``models`` evaluated on both (built once per test session)."""
    key = ",".join(models)
    if key not in _TEMPLATES:
        from orchestration.registry_sync import sync_model_partitions
        from runtime.partitions import partition_key

        specs = {"bm25": BM25, "bm25-k12": BM25_K12}
        world = new_world(tmp_path_factory.mktemp("operated_world") / "w", [specs[m] for m in models])
        defs = world.defs()
        with world.instance() as instance:
            sync_model_partitions(instance, world.resources()["registry"])
            curate(world, instance, defs, ["scifact", "liveqa_medquad"])
            for m in models:
                for t in ("scifact", "liveqa_medquad"):
                    evaluate(instance, defs, partition_key(m, t))
            assert defs.resolve_job_def("build_leaderboard").execute_in_process(instance=instance, run_config=QUIET).success
        _TEMPLATES[key] = world
    return _TEMPLATES[key]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(cmd: list[str], url: str, env: dict | None = None, log: Path | None = None, timeout: float = 120):
    """Start ``cmd`` in its own process group, wait until ``url`` answers, stop the group afterwards."""
    import os
    import subprocess
    import time
    import urllib.error
    import urllib.request

    from tests import processes

    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = processes.start(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text()[-3000:] if log else ""
                    raise RuntimeError(f"{cmd[0]} did not answer on {url} (exit code {proc.poll()}):\n{tail}") from None
                time.sleep(0.5)
        yield proc
    finally:
        processes.stop(proc, grace=20)
        if log:
            out.close()


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port`` (from /proc/net/tcp and tcp6)."""
    import ipaddress

    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:  # 0A = LISTEN
                raw = bytes.fromhex(addr)
                # the kernel prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.add(str(ipaddress.ip_address(raw)))
    return found
