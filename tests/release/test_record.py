"""The comparison rules of a rebuilt artifact file, and what may be written where: fast, no git, DVC or Dagster.

Expected values are worked out by hand: the perturbations below are placed on rows the version
file samples (or not), so the largest absolute difference reported is the one put there.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from medbench_core.storage import sha256_file
from medbench_release.compare import FileVerdict, Verdict, compare_file, compare_vectors, entry_changes
from medbench_release.record import ARRAY_TOLERANCE, array_probe, describe_file, file_rule, stable_json_sha256
from medbench_release.remote import config_credentials, public_url


def _vectors(rows: int = 20, dim: int = 8) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)


def _described(path, arr=None):
    if arr is not None:
        np.save(path, arr, allow_pickle=False)
    return describe_file(path, sha256_file(path), path.stat().st_size)


def test_float_arrays_within_the_tolerance_report_their_largest_absolute_difference(tmp_path):
    arr = _vectors()
    want = _described(tmp_path / "corpus.npy", arr)
    assert want["rule"] == "array" and want["probe"]["rows"] == [0, 6, 13, 19]  # evenly spaced rows kept in the version file

    moved = arr.copy()
    moved[13, 2] += np.float32(4e-6)  # a sampled row: seen exactly
    np.save(tmp_path / "rebuilt.npy", moved, allow_pickle=False)
    got = compare_vectors(want, tmp_path / "rebuilt.npy", "array", None, ARRAY_TOLERANCE)
    assert got.verdict == "within_tolerance"
    assert got.max_abs_diff == pytest.approx(float(moved[13, 2]) - float(arr[13, 2]))
    assert "over 4 sampled rows and the sum" in got.detail

    moved[13, 2] = arr[13, 2] + np.float32(3e-4)  # beyond 1e-5
    np.save(tmp_path / "rebuilt.npy", moved, allow_pickle=False)
    got = compare_vectors(want, tmp_path / "rebuilt.npy", "array", None, ARRAY_TOLERANCE)
    assert got.verdict == "differs" and got.max_abs_diff == pytest.approx(3e-4, rel=1e-3)


def test_a_change_off_the_sampled_rows_is_caught_by_the_sum_or_by_the_published_file(tmp_path):
    arr = _vectors()
    want = _described(tmp_path / "corpus.npy", arr)
    moved = arr.copy()
    moved[5, 0] += np.float32(0.05)  # row 5 is not sampled; the sum moves by 0.05 > 1e-5 x 160 values
    np.save(tmp_path / "rebuilt.npy", moved, allow_pickle=False)
    got = compare_vectors(want, tmp_path / "rebuilt.npy", "array", None, ARRAY_TOLERANCE)
    assert got.verdict == "differs" and got.max_abs_diff == 0.0 and "sum differs by 0.05" in got.detail

    moved[5, 0] = arr[5, 0] + np.float32(1e-3)  # too small for the sum's bound: only the published file shows it
    np.save(tmp_path / "rebuilt.npy", moved, allow_pickle=False)
    assert compare_vectors(want, tmp_path / "rebuilt.npy", "array", None, ARRAY_TOLERANCE).verdict == "within_tolerance"
    got = compare_vectors(want, tmp_path / "rebuilt.npy", "array", tmp_path / "corpus.npy", ARRAY_TOLERANCE)
    assert got.verdict == "differs" and got.max_abs_diff == pytest.approx(1e-3, rel=1e-3) and "over all 160 values" in got.detail

    np.save(tmp_path / "rebuilt.npy", arr[:19], allow_pickle=False)
    assert "shape [19, 8] float32, the version has [20, 8] float32" in compare_vectors(want, tmp_path / "rebuilt.npy", "array", None, 1e-5).detail


def test_a_faiss_index_is_compared_by_its_vectors(tmp_path):
    import faiss

    arr = _vectors()
    for name, vectors in (("index.faiss", arr), ("rebuilt.faiss", arr + np.float32(2e-6))):
        index = faiss.IndexFlatIP(arr.shape[1])
        index.add(vectors)
        faiss.write_index(index, str(tmp_path / name))
    want = _described(tmp_path / "index.faiss")
    assert want["rule"] == "faiss" and want["probe"]["shape"] == [20, 8]
    got = compare_vectors(want, tmp_path / "rebuilt.faiss", "faiss", None, ARRAY_TOLERANCE)
    assert got.verdict == "within_tolerance" and got.max_abs_diff == pytest.approx(2e-6, rel=0.2)


def test_info_json_is_compared_without_its_timings_other_json_byte_for_byte(tmp_path):
    info = {"k": 100, "n_rows": 300, "seconds": 1.25}
    (tmp_path / "info.json").write_text(json.dumps(info))
    want = _described(tmp_path / "info.json")
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "info.json").write_text(json.dumps({**info, "seconds": 9.5}, indent=2))
    rebuilt = {"sha256": sha256_file(tmp_path / "again" / "info.json")}
    got = compare_file("info.json", want, tmp_path / "again", rebuilt, published=None, metrics=None, tolerance=1e-5)
    assert got == FileVerdict(Verdict.IDENTICAL, detail="same apart from timings")
    (tmp_path / "again" / "info.json").write_text(json.dumps({**info, "k": 10}))
    assert stable_json_sha256(tmp_path / "again" / "info.json") != want["stable_sha256"]
    assert compare_file("info.json", want, tmp_path / "again", rebuilt, published=None, metrics=None, tolerance=1e-5).verdict == "differs"
    assert file_rule(tmp_path / "doc_ids.json") == "exact" and file_rule(tmp_path / "run.parquet") == "run"
    np.save(tmp_path / "chunk_doc.npy", np.arange(4), allow_pickle=False)
    assert file_rule(tmp_path / "chunk_doc.npy") == "exact"  # integers: no tolerance


def test_metrics_match_to_1e9(tmp_path):
    want = {"sha256": "0" * 64, "rule": "metrics"}
    (tmp_path / "metrics.json").write_text(json.dumps({"mean": {"ndcg_at_10": 0.5 + 1e-12, "recall_at_10": 0.25}, "breakdowns": {}}))
    rebuilt = {"sha256": sha256_file(tmp_path / "metrics.json")}
    logged = {"ndcg_at_10": 0.5, "recall_at_10": 0.25}
    assert compare_file("metrics.json", want, tmp_path, rebuilt, published=None, metrics=logged, tolerance=1e-5).verdict == "within_tolerance"
    got = compare_file("metrics.json", want, tmp_path, rebuilt, published=None, metrics={**logged, "ndcg_at_10": 0.5 + 2e-9}, tolerance=1e-5)
    assert got.verdict == "differs" and got.detail.startswith("1 metric(s) differ beyond 1e-09: ndcg_at_10")


def test_entry_changes_name_each_setting_that_moved():
    old = {"name": "bm25", "kind": "bm25", "settings": {"k1": 1.2, "b": 0.75}}
    new = {"name": "bm25", "kind": "bm25", "settings": {"k1": 1.3, "b": 0.75, "stemmer": "porter"}}
    assert entry_changes(old, new) == ["settings.k1: 1.2 -> 1.3", "settings.stemmer: '(absent)' -> 'porter'"]


def test_credentials_are_found_by_option_and_never_recorded_in_a_url():
    assert public_url("ssh://alice:s3cret@host.example:2222/srv/dvc") == "ssh://alice@host.example:2222/srv/dvc"
    assert public_url("s3://bucket/medbench") == "s3://bucket/medbench"
    assert public_url("/srv/medbench-dvc") == "/srv/medbench-dvc"
    text = "[core]\n    remote = medbench\n['remote \"medbench\"']\n    url = s3://b/p\n    secret_access_key = XYZ\n    # password = commented\n"
    assert config_credentials(text, ".dvc/config") == [".dvc/config: [remote medbench] secret_access_key"]
    assert config_credentials("['remote \"x\"']\n    url = ssh://u:pw@h/p\n", "f") == ["f: [remote x] url carries a password"]
    assert config_credentials("['remote \"x\"']\n    url = ssh://u@h/p\n    keyfile = ~/.ssh/id_ed25519\n", "f") == []


def test_array_probe_keeps_few_rows():
    probe = array_probe(np.zeros((5183, 384), dtype=np.float32))
    assert probe["rows"] == [0, 1727, 3455, 5182] and len(probe["values"]) == 4 * 384 * 4 * 4 // 3  # base64 of 4 float32 rows


def test_the_version_file_text_reads_back_and_gives_each_file_one_line():
    from medbench_release.record import dumps_version

    files = {f"images/{i:04d}.png": {"sha256": f"{i:064x}", "size": i, "rule": "exact"} for i in range(3)}
    record = {
        "format": 2,
        "tag": "v1",
        "artifacts": [{"stage": "curated_task", "model": None, "task": "t", "path": "tasks/t", "key": "k", "files": files}],
        "runs": [],
    }
    text = dumps_version(record)
    assert json.loads(text) == record
    assert [ln.strip() for ln in text.splitlines() if "images/" in ln] == [
        f'"images/{i:04d}.png": {{"rule": "exact", "sha256": "{i:064x}", "size": {i}}}' + ("," if i < 2 else "") for i in range(3)
    ]
    assert text.index('"format"') < text.index('"artifacts"')  # the record's own order, not sorted


def test_a_fusion_entry_of_a_version_is_re_scored_without_rebuilding_its_spec(tmp_path):
    """The pull path re-searches only models with a stored corpus; a derived entry's record holds no
    upstreams, so making its spec would fail (it did, for the bundled fusion: 'kind fusion needs ...')."""
    from medbench_release.reproduce import _research

    entry = {"model": "bm25-minilm-rrf", "model_kind": "fusion", "model_id": "fusion", "model_settings": {}, "task": "scifact"}
    dirs = {"run": tmp_path / "run", "metrics": tmp_path / "metrics"}
    assert _research(entry, None, dirs, tmp_path) == (None, "run built from upstream runs (re-scored, not re-searched)")


def test_a_run_keeps_the_top_of_a_few_queries_and_older_version_files_are_read_with_todays_rule(tmp_path):
    import polars as pl

    from medbench_release.record import effective_rule, run_probe

    n_queries, depth = 30, 25
    run = pl.DataFrame(
        {
            "query_id": [f"q{i:02d}" for i in range(n_queries) for _ in range(depth)],
            "doc_id": [f"d{j}" for _ in range(n_queries) for j in range(depth)],
            "score": [float(np.float32(1 - j / 100)) for _ in range(n_queries) for j in range(depth)],
            "rank": [j + 1 for _ in range(n_queries) for j in range(depth)],
        },
        schema_overrides={"score": pl.Float32, "rank": pl.Int32},
    )
    run.write_parquet(tmp_path / "run.parquet")
    want = _described(tmp_path / "run.parquet")
    assert want["rule"] == "run"
    probe = want["probe"]
    # 8 evenly spaced of 30 queries (0, 4, 8, 12, 17, 21, 25, 29), each's top 20 with its float32 scores exactly.
    assert list(probe["queries"]) == ["q00", "q04", "q08", "q12", "q17", "q21", "q25", "q29"] and probe["ranks"] == 20
    assert probe["queries"]["q04"][:2] == [["d0", 1.0], ["d1", float(np.float32(0.99))]] and len(probe["queries"]["q29"]) == 20
    assert run_probe(tmp_path / "run.parquet") == probe
    # A format-2 file of before the rule recorded "exact" for runs and their per-query metrics.
    assert [effective_rule(n, "exact") for n in ("run.parquet", "run.trec", "per_query.parquet", "doc_ids.json")] == ["run", "run", "per_query", "exact"]
