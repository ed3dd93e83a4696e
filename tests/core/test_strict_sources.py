"""Sources read strictly and named exactly (issue 24.2), and no reader drops a record's text silently (issue 22.2).

Each case is written by the test in the reader's own layout (tests/core/reader_fixtures.py) and read
through the registry as tasks.yaml would read it.
"""

from __future__ import annotations

import json
import re

import pytest
from reader_fixtures import WRITERS, jsonl, write_beir, write_frenchmedmcqa, write_m3retrieve, write_mteb

from medbench_core.errors import DataError
from medbench_core.taskdata.readers import ReadContext, get_reader, parse_options


def read(name, written, tmp_path, **extra):
    reader = get_reader(name)
    options = parse_options(reader, {"name": "t", **written.options, **extra}, "test")
    return reader.read(written.source, options, ReadContext(scratch=tmp_path / "scratch"))


# --- no silent drop, in every reader -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_reader_reads_its_fixture(tmp_path, name):
    task = read(name, WRITERS[name](tmp_path / "src", None), tmp_path)
    assert task.queries.height >= 1 and task.corpus.height >= 2


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_text_in_a_field_the_reader_does_not_map_is_refused_naming_file_place_id_and_field(tmp_path, name):
    written = WRITERS[name](tmp_path / "src", "body_text")
    with pytest.raises(DataError) as err:
        read(name, written, tmp_path)
    message = str(err.value)
    assert message.startswith(f"{written.file}{written.place}"), message
    assert written.rid in message
    assert "'body_text' holds text that this reader does not map" in message
    assert re.search(r"the (fields|arrays) it knows are \w", message), message


def test_the_mteb_reader_refuses_m3retrieves_captions_instead_of_dropping_them(tmp_path):
    # The bug of issue 22: an MTEB reader on M3Retrieve's files made every query image-only, quietly.
    written = write_m3retrieve(tmp_path / "m3", None)
    with pytest.raises(DataError) as err:
        read("mteb", written, tmp_path)
    assert str(err.value) == (
        f"{written.file}:1: queries record q1: field 'caption' holds text that this reader does not map, and the record would be "
        "left with nothing; the fields it knows are _id, id, lang, language, licence, license, text"
    )


def test_unknown_fields_are_kept_out_only_when_they_would_lose_text(tmp_path):
    # A record that has its text may carry other fields (BEIR's metadata, a URL): nothing is lost.
    w = write_mteb(tmp_path / "a", None)
    jsonl(w.file, [{"_id": "q1", "text": "big toe pain", "url": "https://example.org/q1"}, {"_id": "q2", "text": "asthma"}])
    assert read("mteb", w, tmp_path).queries.height == 2
    # ignore_fields states a field is not the text; then the record is refused for having none.
    w = write_mteb(tmp_path / "b", "body_text")
    with pytest.raises(DataError, match=r"queries.jsonl:1: queries record q1 has no text$"):
        read("mteb", w, tmp_path, ignore_fields=["body_text"])


def test_two_text_fields_with_different_texts_are_refused(tmp_path):
    w = write_m3retrieve(tmp_path / "m3", None)
    rows = [json.loads(line) for line in w.file.read_text().splitlines()]
    rows[1]["text"] = "a different text"
    jsonl(w.file, rows)
    with pytest.raises(DataError, match=r"queries.jsonl:2: record q2: fields 'caption' and 'text' both hold text, with different values"):
        read("m3retrieve", w, tmp_path)


# --- strict sources -----------------------------------------------------------------------------


def test_non_utf8_bytes_name_file_line_and_byte_offset(tmp_path):
    w = write_beir(tmp_path / "b")
    corpus = w.file
    first = corpus.read_bytes().split(b"\n")[0] + b"\n"
    bad = b'{"_id": "d2", "text": "caf\xe9 au lait"}\n'  # Latin-1, not UTF-8
    corpus.write_bytes(first + bad)
    column = bad.index(b"\xe9") + 1
    offset = len(first) + column - 1
    with pytest.raises(DataError) as err:
        read("beir", w, tmp_path)
    assert str(err.value).startswith(f"{corpus}:2: not UTF-8: byte 0xe9 at byte offset {offset} in the file (column {column}, ")
    # The same rule in JSON files (FrenchMedMCQA) and qrels.
    f = write_frenchmedmcqa(tmp_path / "f")
    raw = f.file.read_bytes().replace("Question 2".encode(), "Qu\xe9stion 2".encode("latin-1"))
    f.file.write_bytes(raw)
    at = raw.index(b"\xe9")
    with pytest.raises(DataError, match=rf"^{re.escape(str(f.file))}:1: not UTF-8: byte 0xe9 at byte offset {at} "):
        read("frenchmedmcqa", f, tmp_path)
    w = write_beir(tmp_path / "q")
    qrels = w.source / "qrels" / "test.tsv"
    qrels.write_bytes(qrels.read_bytes() + b"q\xff\td1\t1\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(qrels))}:4: not UTF-8: byte 0xff"):
        read("beir", w, tmp_path)


@pytest.mark.parametrize("part", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_an_empty_file_is_named(tmp_path, part):
    w = write_beir(tmp_path / "b")
    (w.source / part).write_bytes(b"")
    with pytest.raises(DataError) as err:
        read("beir", w, tmp_path)
    assert str(err.value) == f"{w.source / part}: file is empty (0 bytes)"
    (w.source / part).write_text("\n\n")
    with pytest.raises(DataError) as err:
        read("beir", w, tmp_path)
    expected = "no judgments" if part.endswith(".tsv") else "no records (the file holds only blank lines)"
    assert str(err.value) == f"{w.source / part}: {expected}"


def test_an_empty_file_is_named_by_the_hf_readers_too(tmp_path):
    w = write_mteb(tmp_path / "m")
    (w.source / "corpus.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match=rf"^{re.escape(str(w.source / 'corpus.jsonl'))}: file is empty \(0 bytes\)$"):
        read("mteb", w, tmp_path)


def test_duplicate_ids_name_the_file_and_both_lines(tmp_path):
    w = write_beir(tmp_path / "b")
    with open(w.file, "a") as f:
        f.write(json.dumps({"_id": "d1", "text": "again"}) + "\n")
    with pytest.raises(DataError) as err:
        read("beir", w, tmp_path)
    assert str(err.value) == f"{w.file}:3: document id 'd1' appears twice (first at {w.file}:1)"


def test_a_bom_and_crlf_line_ends_are_read_as_the_plain_file(tmp_path):
    plain = read("beir", write_beir(tmp_path / "plain" / "b"), tmp_path)
    w = write_beir(tmp_path / "crlf" / "b")  # the same folder name: BEIR's default source text is it
    for p in (w.source / "corpus.jsonl", w.source / "queries.jsonl", w.source / "qrels" / "test.tsv"):
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes().replace(b"\n", b"\r\n"))
    crlf = read("beir", w, tmp_path)
    assert crlf.content_hash() == plain.content_hash()
    assert crlf.queries["text"].to_list() == plain.queries["text"].to_list() == ["big toe pain", "asthma inhaler"]


def test_a_qrels_tsv_without_its_header_is_refused(tmp_path):
    w = write_beir(tmp_path / "b")
    qrels = w.source / "qrels" / "test.tsv"
    qrels.write_text("q1\td1\t1\nq2\td2\t1\n")
    with pytest.raises(DataError) as err:
        read("beir", w, tmp_path)
    assert str(err.value) == f"{qrels}:1: no header line; a qrels .tsv starts with 'query-id<TAB>corpus-id<TAB>score' (found 'q1\\td1\\t1'); add the header"


def test_ids_are_strings_integer_ids_are_read_as_their_digits_and_collisions_are_refused(tmp_path):
    w = write_mteb(tmp_path / "m")
    jsonl(w.source / "corpus.jsonl", [{"_id": 1, "text": "urate crystals"}, {"_id": "d2", "text": "asthma steroids"}])
    (w.source / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t1\t1\nq2\td2\t1\n")
    task = read("mteb", w, tmp_path)
    assert sorted(task.corpus["doc_id"].to_list()) == ["1", "d2"] and ("q1", "1", 1) in task.qrels.rows()
    corpus = w.source / "corpus.jsonl"
    jsonl(corpus, [{"_id": 1, "text": "urate crystals"}, {"_id": "1", "text": "other"}, {"_id": "d2", "text": "asthma"}])
    with pytest.raises(DataError) as err:
        read("mteb", w, tmp_path)
    assert str(err.value) == (
        f"{corpus}:2: corpus id '1' appears twice (first at {corpus}:1); the number 1 and the string \"1\" are the same id once ids are read as strings"
    )
    for bad, kind in ((1.5, "float 1.5"), (True, "bool True"), ([1], "list [1]")):
        jsonl(corpus, [{"_id": bad, "text": "x"}])
        with pytest.raises(DataError, match=rf"^{re.escape(str(corpus))}:1: '_id' is {re.escape(kind)}; an id must be a string or an integer$"):
            read("mteb", w, tmp_path)
