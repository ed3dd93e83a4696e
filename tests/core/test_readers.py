"""The BEIR reader: counts and spot-checked records of the real data, and bad input named precisely."""

import json
import re
from pathlib import Path

import pytest

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.beir import BeirOptions, read_beir
from medbench_core.taskdata.readers.common import read_qrels_tsv

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
LICENCES = {"query_licence": "CC-BY-4.0", "doc_licence": "CC-BY-4.0"}


def test_scifact_train_counts_and_records():
    task = read_beir(DATA / "scifact", BeirOptions(name="scifact", split="train", query_licence="CC-BY-4.0", doc_licence="ODC-By-1.0"))
    assert (task.queries.height, task.corpus.height, task.qrels.height) == (809, 5183, 919)
    assert task.qrels["relevance"].unique().to_list() == [1]  # binary judgments
    q0 = task.queries.filter(task.queries["query_id"] == "0").row(0, named=True)
    assert q0["text"] == "0-dimensional biomaterials lack inductive properties." and q0["licence"] == "CC-BY-4.0"
    d = task.corpus.filter(task.corpus["doc_id"] == "4983").row(0, named=True)
    assert d["title"].startswith("Microstructural development of human newborn cerebral white matter") and d["licence"] == "ODC-By-1.0"
    assert task.meta.licences == ("CC-BY-4.0", "ODC-By-1.0")


def test_liveqa_medquad_counts_duplicates_and_grades():
    folder = DATA / "liveqa_medquad"
    # 168 (question, answer) pairs are judged twice: refused unless asked to keep the higher grade.
    # Both places are named: lines 4 and 13 of the file (grep -n "^1\tADAM_0002818_Sec2.txt").
    qrels = re.escape(str(folder / "qrels" / "test.tsv"))
    with pytest.raises(
        DataError,
        match=rf"^{qrels}:13: judgment for query id '1' and document id 'ADAM_0002818_Sec2\.txt' appears twice "
        rf"\(first at {qrels}:4\); set duplicate_judgments: max",
    ):
        read_beir(folder, BeirOptions(name="lq", **LICENCES))
    task = read_beir(folder, BeirOptions(name="lq", duplicate_judgments="max", **LICENCES))
    assert (task.queries.height, task.corpus.height, task.qrels.height) == (103, 1935, 2479 - 168)
    grades = dict(task.qrels.group_by("relevance").len().iter_rows())
    assert grades == {0: 1366, 1: 614, 2: 189, 3: 142}
    # Question 1's answer ADAM_0002818_Sec2 is judged twice; the higher grade (2) is kept.
    row = task.qrels.filter((task.qrels["query_id"] == "1") & (task.qrels["doc_id"] == "ADAM_0002818_Sec2.txt"))
    assert row["relevance"].to_list() == [2]
    # Seven questions have no relevant answer at all; require_positive drops them and their judgments.
    kept = read_beir(folder, BeirOptions(name="lq", duplicate_judgments="max", require_positive=True, **LICENCES))
    assert (kept.queries.height, kept.corpus.height, kept.qrels.height) == (96, 1935, 2147)
    assert set(task.queries["query_id"]) - set(kept.queries["query_id"]) == {"16", "19", "20", "45", "48", "52", "77"}


def write_beir(folder: Path, corpus: list[str], queries: list[str], qrels: str) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(corpus) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n")
    (folder / "qrels" / "test.tsv").write_text(qrels)
    return folder


DOCS = [json.dumps({"_id": "d1", "title": "T", "text": "aspirin"}), json.dumps({"_id": "d2", "text": "gout"})]
QUERIES = [json.dumps({"_id": "q1", "text": "fever"}), json.dumps({"_id": "q2", "text": "toe"})]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n"


def test_small_folder_reads(tmp_path):
    task = read_beir(write_beir(tmp_path / "b", DOCS, QUERIES, QRELS), BeirOptions(name="t", **LICENCES))
    assert task.doc_text() == ["T aspirin", "gout"]
    assert sorted(task.qrels.rows()) == [("q1", "d1", 1), ("q2", "d2", 2)]


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    corpus = [DOCS[0], "", '{"_id": "d2", "text": "gout"', DOCS[1]]  # line 3 is cut short
    folder = write_beir(tmp_path / "b", corpus, QUERIES, QRELS)
    with pytest.raises(DataError) as err:
        read_beir(folder, BeirOptions(name="t", **LICENCES))
    assert str(err.value).startswith(f"{folder / 'corpus.jsonl'}:3: malformed JSON")


def test_non_object_and_id_less_lines_are_named(tmp_path):
    folder = write_beir(tmp_path / "a", DOCS, [QUERIES[0], '["q2", "toe"]'], QRELS)
    with pytest.raises(DataError, match=rf"{folder / 'queries.jsonl'}:2: expected a JSON object, got list"):
        read_beir(folder, BeirOptions(name="t", **LICENCES))
    folder = write_beir(tmp_path / "b", [DOCS[0], json.dumps({"text": "no id"})], QUERIES, QRELS)
    with pytest.raises(DataError, match=rf"{folder / 'corpus.jsonl'}:2: record has no '_id'"):
        read_beir(folder, BeirOptions(name="t", **LICENCES))


def test_qrels_naming_unknown_queries_or_documents_name_the_ids(tmp_path):
    folder = write_beir(tmp_path / "q", DOCS, QUERIES, QRELS + "q9\td1\t1\nq8\td2\t1\n")
    with pytest.raises(DataError) as err:
        read_beir(folder, BeirOptions(name="t", **LICENCES))
    assert "qrels/test.tsv: names 2 query id(s) not in" in str(err.value) and "['q8', 'q9']" in str(err.value)

    folder = write_beir(tmp_path / "d", DOCS, QUERIES, QRELS + "q1\tghost\t1\n")
    with pytest.raises(DataError) as err:
        read_beir(folder, BeirOptions(name="t", **LICENCES))
    assert str(err.value).startswith(str(folder / "qrels" / "test.tsv")) and "unknown document id(s): ['ghost']" in str(err.value)


def test_bad_qrels_lines_name_file_and_line(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\thigh\n")
    with pytest.raises(DataError, match=rf"{path}:3: relevance 'high' is not an integer"):
        read_qrels_tsv(path)
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(DataError, match=rf"{path}:2: expected 3 tab-separated fields"):
        read_qrels_tsv(path)
    path.write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(DataError, match=rf"{path}: no judgments"):
        read_qrels_tsv(path)


def test_missing_files_give_a_clear_message(tmp_path):
    folder = write_beir(tmp_path / "b", DOCS, QUERIES, QRELS)
    with pytest.raises(DataError, match=rf"^{folder / 'qrels' / 'dev.tsv'}: file not found$"):
        read_beir(folder, BeirOptions(name="t", split="dev", **LICENCES))
    (folder / "queries.jsonl").unlink()
    with pytest.raises(DataError, match=rf"^{folder / 'queries.jsonl'}: file not found$"):
        read_beir(folder, BeirOptions(name="t", **LICENCES))
    with pytest.raises(DataError, match="file not found"):
        read_beir(tmp_path / "nowhere", BeirOptions(name="t", **LICENCES))
