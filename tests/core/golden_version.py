"""A benchmark version of part of the golden fixture: recorded once, judged by ``medbench reproduce``'s compare in every lane.

``golden_version.json`` is a version file as medbench_release writes one (artifacts with their files'
hashes, rules and probes; runs with their metrics; the registry), of the artifacts (embeddings, index,
run, metrics) that :func:`golden_outputs.compute` makes for :data:`MODELS` on every fixture task they
read, and of the environment (CPU, kernel paths, libraries: medbench_release.kernels) they were made in.
A rebuild, the same computation here or under a portability lane (tests/portability.py), is judged by
:func:`medbench_release.compare.compare_version`, the compare ``medbench reproduce`` runs after a rebuild
from the sources: the one rule of medbench_release/tolerance.py applied to a small released version.

    python tests/core/golden_version.py --check
    python tests/core/golden_version.py --record   # after changing what these models' stages write (bump their versions too)

The models cover each branch of the rule: BM25 (exact work), a sentence-transformers and an open_clip
model (vectors, FAISS scores, rankings up to ties), ColBERT (MaxSim), a cross-encoder (a model's own
scores) and a fusion of runs (judged by its metrics).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(HERE.parents[1]))
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import golden_outputs  # noqa: E402 (after sys.path)

VERSION = HERE / "golden_version.json"
MODELS = ("bm25", "minilm", "clip", "colbert", "ce", "rrf")
ROOT_TOKEN = "<golden root>"  # the fixture's temporary folder, as models.yaml names it (paths of local models)


def _text(root: Path, name: str) -> str:
    return (root / name).read_text().replace(str(root), ROOT_TOKEN)


def version_record(root: Path) -> dict[str, Any]:
    """The version file of :data:`MODELS`' artifacts under a computed fixture ``root`` (golden_outputs.compute)."""
    from medbench_core.evaluation.scoring import flat_metrics
    from medbench_core.layout import STAGES
    from medbench_release.kernels import environment
    from medbench_release.record import FORMAT, artifact_record, model_upstream, registry_entries

    models_text = _text(root, "models.yaml")
    entries = registry_entries(models_text)
    artifacts, runs = [], []
    found = [(m, t) for m in MODELS for t in golden_outputs.TASK_ORDER if (root / "artifacts" / m / t / "metrics").is_dir()]
    for stage in STAGES:
        for model, task in found:
            folder = root / "artifacts" / model / task / stage
            if folder.is_dir():
                keys = {s: s for s in STAGES if (root / "artifacts" / model / task / s).is_dir()}
                up = model_upstream(folder, stage, keys, entries.get(model))
                artifacts.append(artifact_record(root, folder, stage, model=model, task=task, key=stage, upstream=up))
    for model, task in found:
        metrics = json.loads((root / "artifacts" / model / task / "metrics" / "metrics.json").read_text())
        runs.append({"model": model, "task": task, "model_kind": entries[model]["kind"], "keys": {"metrics": "metrics"}, "metrics": flat_metrics(metrics)})
    return {
        "format": FORMAT,
        "benchmark": "golden",
        "made_with": environment(),
        "registry": {"models.yaml": {"text": models_text}, "tasks.yaml": {"text": _text(root, "tasks.yaml")}},
        "runs": runs,
        "artifacts": artifacts,
    }


def judge(root: Path, record: dict[str, Any] | None = None) -> list[Any]:
    """``medbench reproduce``'s verdicts (compare_version) on the artifacts under ``root`` against the recorded version."""
    from medbench_release.compare import Rebuilt, compare_version

    record = record if record is not None else json.loads(VERSION.read_text())
    rebuilt = Rebuilt(root, _text(root, "models.yaml"), _text(root, "tasks.yaml"), {}, root / "shared")
    return compare_version(record, rebuilt)


def main(argv: list[str] | None = None) -> int:
    from medbench_release.compare import OK, partitions, table
    from medbench_release.record import dumps_version

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write golden_version.json from this code's outputs")
    parser.add_argument("--check", action="store_true", help="judge this code's outputs against golden_version.json (default)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="medbench-golden-version-") as tmp:
        root = Path(tmp)
        golden_outputs.compute(root, set(MODELS))
        if args.record:
            record = version_record(root)
            VERSION.write_text(dumps_version(record))
            print(f"recorded {len(record['artifacts'])} artifacts of {len(record['runs'])} partitions in {VERSION}")
            return 0
        results = judge(root)
        print(table(partitions(results), json.loads(VERSION.read_text())))
        bad = [r for r in results if r.verdict not in OK]
        for r in bad:
            print(f"{r.label}: {r.verdict}: " + "; ".join(f"{n}: {f.detail or f.verdict}" for n, f in r.files.items() if f.verdict not in OK))
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
