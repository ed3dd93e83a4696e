"""Published expansions: R2MED's layout, plain JSONL and Parquet; bad files refused whole, naming
file, line and id, with nothing stored and the earlier artifact kept; hub datasets only pinned and online."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest
from _expansion_fixtures import scifact_subset, synthetic_expansions, write_r2med

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion import ExpansionSpec, load_expansion, split_reasoning, store_expansion
from medbench_core.retrieval.expansion.files import locate_file, read_expansion_file
from medbench_core.retrieval.expansion.stage import build_expansion, expansion_stage_key
from medbench_core.storage import verify_manifest


@pytest.fixture(scope="module")
def task():
    return scifact_subset()


def r2med_spec(root: Path, **kw) -> ExpansionSpec:
    return ExpansionSpec(name="hyde-gpt4", method="hyde", source="file", generator="gpt4", path=str(root), task_folders={"scifact_small": "SciFact"}, **kw)


def test_reads_r2med_layout(tmp_path, task):
    texts = synthetic_expansions(task)
    path = write_r2med(tmp_path, "SciFact", "hyde", "gpt4", task, texts)
    spec = r2med_spec(tmp_path)
    assert locate_file(spec, "scifact_small") == path
    frame, info = build_expansion(spec, task)
    qids = task.queries["query_id"].to_list()
    assert frame["query_id"].to_list() == qids
    assert frame["answer"].to_list() == [texts[q] for q in qids] == frame["raw"].to_list()
    assert frame["reasoning"].to_list() == [""] * len(qids)
    assert info["n_queries"] == 30 and info["identity"]["generator"] == "gpt4"
    assert len(info["sample"]) == 5 and info["sample"][0] == {"query_id": qids[0], "answer": texts[qids[0]]}
    # The key follows the file's bytes, not where the folder is.
    moved = tmp_path / "elsewhere"
    write_r2med(moved, "SciFact", "hyde", "gpt4", task, texts)
    assert expansion_stage_key(r2med_spec(moved), task) == info["key"] == expansion_stage_key(spec, task)
    texts2 = {**texts, qids[0]: texts[qids[0]] + " more"}
    write_r2med(moved, "SciFact", "hyde", "gpt4", task, texts2)
    assert expansion_stage_key(r2med_spec(moved), task) != info["key"]


def test_reasoning_split_off_think():
    assert split_reasoning("<think>\nstep 1, step 2\n</think>\n\nThe answer.") == ("The answer.", "step 1, step 2")
    assert split_reasoning("no tags at all ") == ("no tags at all ", "")  # as written: R2MED's base.py l.13 returns the text itself
    # Only the first </think> splits; an unclosed <think> is all answer (R2MED reads it so).
    assert split_reasoning("a</think>b</think>c") == ("b</think>c", "a")
    assert split_reasoning("<think>never closed") == ("<think>never closed", "")
    assert split_reasoning("x</think>y", rule="none") == ("x</think>y", "")


def test_reasoning_generator_file_uses_answer_only(tmp_path, task):
    texts = {q: f"<think>the user asks about {q}; think hard</think>\nAnswer for {q}." for q in task.queries["query_id"].to_list()}
    write_r2med(tmp_path, "SciFact", "hyde", "qwq-32b", task, texts)
    spec = ExpansionSpec(name="hyde-qwq", method="hyde", source="file", generator="qwq-32b", path=str(tmp_path), task_folders={"scifact_small": "SciFact"})
    frame, _ = build_expansion(spec, task)
    q = task.queries["query_id"][0]
    row = frame.filter(pl.col("query_id") == q).row(0, named=True)
    assert row["answer"] == f"Answer for {q}." and row["reasoning"] == f"the user asks about {q}; think hard"


def test_plain_jsonl_and_parquet(tmp_path, task):
    texts = synthetic_expansions(task)
    qids = task.queries["query_id"].to_list()
    (tmp_path / "scifact_small.jsonl").write_text("\n".join(json.dumps({"id": q, "expansion": texts[q]}) for q in reversed(qids)) + "\n")
    pl.DataFrame({"query_id": qids, "expansion": [texts[q] for q in qids]}).write_parquet(tmp_path / "scifact_small.parquet")
    for fmt in ("jsonl", "parquet"):
        spec = ExpansionSpec(name="plain", method="query2doc", source="file", generator="someone", path=str(tmp_path), format=fmt)
        frame, _ = build_expansion(spec, task)
        assert dict(frame.select("query_id", "answer").iter_rows()) == texts


BAD_CASES = [
    # (what, extra lines appended, query ids left out, expected fragments)
    ("missing id", [json.dumps({"text": "x", "hy_doc": "some text"})], set(), [":31: record has no 'id'"]),
    ("unknown id", [json.dumps({"id": "no-such-query", "hy_doc": "some text"})], set(), [":31: id no-such-query is not a query of task scifact_small"]),
    ("malformed line", ['{"id": "1", "hy_doc": '], set(), [":31: malformed JSON"]),
    ("duplicate id", ["DUP"], set(), [":31: id {q0} appears again (first at line 1)"]),
    # what R2MED's code fails on (KeyError on e["hy_doc"]; text*2 + " " + None): its own line left out
    ("missing hy_doc", ["NOFIELD"], {"q1"}, [":30: id {q1} has a missing 'hy_doc' (R2MED's code fails on it too)"]),
    ("null hy_doc", ["NULL"], {"q1"}, [":30: id {q1} has a null 'hy_doc' (R2MED's code fails on it too)"]),
    ("query without expansion", [], {"q2"}, ["1 query id(s) of task scifact_small have no expansion, e.g. {q2}"]),
]


@pytest.mark.parametrize("what,extra,skip,fragments", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_file_refused_naming_file_line_and_id_nothing_stored(tmp_path, task, what, extra, skip, fragments):
    qids = task.queries["query_id"].to_list()
    names = {"q0": qids[0], "q1": qids[1], "q2": qids[2]}
    texts = synthetic_expansions(task)
    # A good artifact stored earlier must survive the failed attempt.
    good_root = tmp_path / "good"
    write_r2med(good_root, "SciFact", "hyde", "gpt4", task, texts)
    folder = tmp_path / "store" / "hyde-gpt4" / "scifact_small" / "key"
    good, info = build_expansion(r2med_spec(good_root), task)
    store_expansion(folder, good, info)
    before = (folder / "expansions.parquet").read_bytes()

    lines = []
    for e in extra:
        if e == "DUP":
            lines.append(json.dumps({"id": qids[0], "hy_doc": "again"}))
        elif e == "NOFIELD":
            lines.append(json.dumps({"id": qids[1], "text": task.queries["text"][1]}))
        elif e == "NULL":
            lines.append(json.dumps({"id": qids[1], "text": task.queries["text"][1], "hy_doc": None}))
        else:
            lines.append(e)
    bad_root = tmp_path / "bad"
    skipped = {names[s] for s in skip}
    path = write_r2med(bad_root, "SciFact", "hyde", "gpt4", task, texts, extra=lines, skip=skipped)
    with pytest.raises(DataError) as err:
        frame, inf = build_expansion(r2med_spec(bad_root), task)
        store_expansion(folder, frame, inf)
    msg = str(err.value)
    assert str(path) in msg and "nothing stored" in msg, msg
    for frag in fragments:
        assert frag.format(**names) in msg, msg
    # The earlier artifact is untouched and still verifies; no temporary folder is left behind.
    assert (folder / "expansions.parquet").read_bytes() == before
    verify_manifest(folder)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["key"]
    assert load_expansion(folder)[0].equals(good)


def test_empty_r2med_expansions_are_kept_counted_and_named_plain_files_refuse_them(tmp_path, task):
    """R2MED's load_retrieval_data (eval_BM25.py l.124-133, eval_retrieval.py l.37-44 at 62b7074) takes
    ``e["hy_doc"]`` whatever string it holds, and split_response_for_r1 (base.py l.8-13) an empty answer after ``</think>``."""
    qids = task.queries["query_id"].to_list()
    texts = {**synthetic_expansions(task), qids[1]: "", qids[4]: "  \n "}
    write_r2med(tmp_path / "r2med", "SciFact", "hyde", "gpt4", task, texts)
    frame, info = build_expansion(r2med_spec(tmp_path / "r2med"), task)
    assert dict(frame.select("query_id", "answer").iter_rows())[qids[4]] == "  \n "  # as written (R2MED passes it on as it is)
    assert info["empty_answers"] == [qids[1], qids[4]]
    assert info["notes"] == [
        f"2 of 30 queries have an empty expansion, scored with the empty string as R2MED's code scores them (kept in the mean): {qids[1]}, {qids[4]}"
    ]
    # a reasoning generator's answer that is empty after </think> too
    reasoning = {**synthetic_expansions(task), qids[2]: "<think>the steps</think>\n"}
    write_r2med(tmp_path / "r2med", "SciFact", "hyde", "qwq-32b", task, reasoning)
    spec = ExpansionSpec(
        name="hyde-qwq", method="hyde", source="file", generator="qwq-32b", path=str(tmp_path / "r2med"), task_folders={"scifact_small": "SciFact"}
    )
    frame, info = build_expansion(spec, task)
    assert info["empty_answers"] == [qids[2]] and frame.filter(pl.col("query_id") == qids[2])["reasoning"][0] == "the steps"
    # medbench's own plain format refuses an empty text, as before
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "scifact_small.jsonl").write_text("".join(json.dumps({"id": q, "expansion": texts[q]}) + "\n" for q in qids))
    plain = ExpansionSpec(name="plain", method="hyde", source="file", generator="x", path=str(tmp_path / "plain"), format="jsonl")
    with pytest.raises(DataError, match=rf":2: id {qids[1]} has an empty 'expansion'"):
        build_expansion(plain, task)


def test_r2med_text_must_be_the_tasks_query(tmp_path, task):
    texts = synthetic_expansions(task)
    path = write_r2med(tmp_path, "SciFact", "hyde", "gpt4", task, texts)
    lines = path.read_text().splitlines()
    obj = json.loads(lines[4])
    obj["text"] = "a query from another task"
    lines[4] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"{path}:5: id {obj['id']}: its 'text' is not the query of task scifact_small"):
        read_expansion_file(r2med_spec(tmp_path), task, path)


def test_hub_dataset_needs_a_revision(task):
    with pytest.raises(DataError, match="needs a pinned 'revision'"):
        ExpansionSpec(name="h", method="hyde", source="file", generator="gpt4", path="hub:R2MED/Biology")
    with pytest.raises(DataError, match=r"'revisions' \(one commit per task\) needs a path with \{task\}"):
        ExpansionSpec(name="h", method="hyde", source="file", generator="gpt4", path="hub:R2MED/Biology", revisions={"Biology": "a" * 40})


SHAS = {"Biology": "8b9fec2db9eda4b5742d03732213fbaee8169556", "Bioinformatics": "6021fce366892cbfd7837fa85a4128ea93315e18"}


def hub_spec(**kw) -> ExpansionSpec:
    """One entry for every task: each R2MED task is its own hub dataset (R2MED/Biology, ...)."""
    return ExpansionSpec(name="hyde-qwq", method="hyde", source="file", generator="qwq-32b", path="hub:R2MED/{task}",
                         task_folders={"scifact_small": "Biology", "scifact_other": "Bioinformatics"}, **{"revisions": SHAS, **kw})  # fmt: skip


def test_one_entry_reads_every_task_from_its_own_hub_dataset_in_the_local_hub_cache(tmp_path, task):
    from medbench_core.taskdata.task import make_task

    other = make_task(dataclasses.replace(task.meta, name="scifact_other"), task.queries, task.corpus, task.qrels)
    cache = tmp_path / "hub"
    texts = {}
    for folder, t in (("Biology", task), ("Bioinformatics", other)):
        # huggingface_hub's cache layout: datasets--<org>--<name>/snapshots/<commit>/<file in the repository>
        texts[folder] = {q: f"<think>reasoning about {q}</think> {folder} passage for {q}" for q in t.queries["query_id"].to_list()}
        write_r2med(cache / f"datasets--R2MED--{folder}" / "snapshots" / SHAS[folder], "", "hyde", "qwq-32b", t, texts[folder])
    spec = hub_spec()
    for folder, t in (("Biology", task), ("Bioinformatics", other)):
        assert (
            locate_file(spec, t.name, hub_cache=cache)
            == cache / f"datasets--R2MED--{folder}" / "snapshots" / SHAS[folder] / "hyde/qwq-32b/query_with_hydoc.jsonl"
        )
        frame, info = build_expansion(spec, t, hub_cache=cache)  # offline: nothing downloaded
        q = t.queries["query_id"][0]
        assert frame.filter(pl.col("query_id") == q)["answer"].item() == f"{folder} passage for {q}"  # qwq-32b: R2MED's </think> rule
        assert (info["identity"]["hub"], info["identity"]["revision"], info["identity"]["reasoning"]) == (f"R2MED/{folder}", SHAS[folder], "think")
    # A branch resolves through the cache's refs, as huggingface_hub records it; the key names the commit.
    (cache / "datasets--R2MED--Biology" / "refs").mkdir()
    (cache / "datasets--R2MED--Biology" / "refs" / "main").write_text(SHAS["Biology"])
    branch = hub_spec(revisions={"Biology": "main"})
    assert expansion_stage_key(branch, task, hub_cache=cache) == expansion_stage_key(spec, task, hub_cache=cache)
    # Not in the cache, offline: refused, saying how to get it.
    with pytest.raises(
        DataError,
        match=r"hyde/qwq-32b/query_with_hydoc.jsonl of hub dataset R2MED/Bioinformatics@6021fce.* is not in the local hub cache"
        r".*hf download R2MED/Bioinformatics",
    ):
        build_expansion(hub_spec(), other, hub_cache=tmp_path / "empty")
    with pytest.raises(
        DataError, match=r"no revision for hub dataset 'R2MED/Bioinformatics' \(task scifact_other\); add Bioinformatics: <commit> to 'revisions'"
    ):
        locate_file(hub_spec(revisions={"Biology": SHAS["Biology"]}), "scifact_other", hub_cache=cache)


def test_missing_folder_says_where(tmp_path, task):
    spec = r2med_spec(tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"nowhere/SciFact/hyde/gpt4/query_with_hydoc.jsonl not found"):
        build_expansion(spec, task)
