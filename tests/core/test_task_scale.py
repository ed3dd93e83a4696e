"""A large corpus without holding it twice (issue 25): the content hash and doc_text, a block of rows at a time, give what the whole frame gave."""

import hashlib

import polars as pl
import pytest

from medbench_core.taskdata import task as task_module
from medbench_core.taskdata.task import TaskMeta, make_task


def whole_frame_digest(df: pl.DataFrame | None, key: list[str]) -> str:
    """The content hash's frame digest as it was computed before: the whole sorted frame's NDJSON."""
    if df is None:
        return "none"
    return hashlib.sha256(df.sort(key).write_ndjson().encode("utf-8")).hexdigest()


def corpus(n: int = 23) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "doc_id": [f"d{(i * 7) % n:03d}" for i in range(n)],  # not in id order
            "title": [None if i % 5 == 0 else "" if i % 5 == 1 else f" Titre {i} \u00e9" for i in range(n)],
            "text": [None if i % 7 == 3 else f'body "{i}"\n\ttab\u2003' for i in range(n)],
            "concept_ids": [[f"c{i}"] if i % 3 else None for i in range(n)],
        }
    )


def small_task(n: int = 23):
    docs = corpus(n)
    queries = pl.DataFrame({"query_id": ["q2", "q1"], "text": ["b", "a"]})
    qrels = pl.DataFrame({"query_id": ["q2", "q1", "q1"], "doc_id": [docs["doc_id"][3], docs["doc_id"][0], docs["doc_id"][1]], "relevance": [1, 2, 0]})
    return make_task(TaskMeta(name="t", source="s"), queries, docs, qrels)


@pytest.mark.parametrize("rows", [1, 4, 20_000])
def test_frame_digest_in_blocks_equals_the_whole_frame(monkeypatch, rows):
    monkeypatch.setattr(task_module, "DIGEST_ROWS", rows)
    t = small_task()
    for df, key in ((t.corpus, ["doc_id"]), (t.queries, ["query_id"]), (t.qrels, ["query_id", "doc_id"]), (None, ["x"])):
        assert task_module._frame_digest(df, key) == whole_frame_digest(df, key)


def test_content_hash_does_not_depend_on_the_block_size(monkeypatch):
    hashes = set()
    for rows in (1, 3, 20_000):
        monkeypatch.setattr(task_module, "DIGEST_ROWS", rows)
        hashes.add(small_task().content_hash())
    assert len(hashes) == 1


@pytest.mark.parametrize("rows", [1, 5, 20_000])
def test_doc_text_is_the_joined_title_and_text_row_by_row(monkeypatch, rows):
    monkeypatch.setattr(task_module, "DOC_TEXT_ROWS", rows)
    t = small_task()
    want = [(f"{a} {b or ''}" if a else (b or "")).strip() for a, b in zip(t.corpus["title"].to_list(), t.corpus["text"].to_list())]
    got = t.doc_text()
    assert len(got) == 23 and list(got) == want and got == want and want == got
    assert got[0] == want[0] and got[-1] == want[-1] and got[4:9] == want[4:9] and got[::-5] == want[::-5]
    # Python's strip: the em space (U+2003) goes, title-less rows keep the body alone.
    assert want[2] == 'Titre 2 \u00e9 body "2"\n\ttab' and want[0] == 'body "0"\n\ttab' and want[3] == "Titre 3 \u00e9"
    with pytest.raises(IndexError):
        got[23]
    assert got != want[:-1] and got != [*want[:-1], "other"]
