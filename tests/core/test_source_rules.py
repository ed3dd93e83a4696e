"""Hostile sources, rule by rule (issue 29.6): ids, grades, JSON nesting, links, archives, YAML and names.

Each rule is enforced at one place (medbench_core/taskdata/source_rules.py, archives.py, yaml_file.py,
the name patterns), so each test reaches it through a real reader or loader with one bad value, and
checks the refusal names the file, the line and the value, and that the real formats still read.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
import zipfile
from pathlib import Path

import polars as pl
import pytest
from reader_fixtures import jsonl, write_beir, write_m3retrieve, write_mbeir, write_medicat, write_pneumoniamnist, write_vqa_rad

from medbench_core.errors import ConfigError, DataError
from medbench_core.taskdata import archives
from medbench_core.taskdata.archives import member_names, safe_extract
from medbench_core.taskdata.catalog import TaskEntry, build_task, curation_inputs, load_catalog
from medbench_core.taskdata.readers import ReadContext, get_reader, parse_options
from medbench_core.taskdata.readers.common import load_json, relevance
from medbench_core.taskdata.readers.hf_files import dataset_card
from medbench_core.taskdata.source_rules import check_task, id_problem, reference_problem
from medbench_core.taskdata.task import TaskMeta, make_task
from medbench_core.yaml_file import MAX_YAML_BYTES, load_yaml, read_yaml_mapping

ROOT = Path(__file__).resolve().parents[2]


def read(name, written, tmp_path, **extra):
    reader = get_reader(name)
    options = parse_options(reader, {"name": "t", **written.options, **extra}, "test")
    return reader.read(written.source, options, ReadContext(scratch=tmp_path / "scratch"))


def entry(path: str, **options) -> TaskEntry:
    opts = {"query_licence": "CC-BY-4.0", "doc_licence": "CC-BY-4.0", **options}
    return TaskEntry(name="t", reader="beir", path=path, options=opts)


# --- ids ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, problem",
    [
        ("d 1", "holds a space (U+0020 SPACE) at character 2"),
        ("d\t1", "holds a tab (U+0009) at character 2"),
        ("d1\r2", "holds a carriage return (U+000D) at character 3"),
        ("d\n1", "holds a line feed (newline) (U+000A) at character 2"),
        ("d\x001", "holds a NUL byte (U+0000) at character 2"),
        ("d\u00a01", "holds a space (U+00A0 NO-BREAK SPACE) at character 2"),
        ("d\u200b1", "holds a format character (U+200B ZERO WIDTH SPACE) at character 2"),
        ("\u202ed1", "holds a format character (U+202E RIGHT-TO-LEFT OVERRIDE) at character 1"),
        ("d\u20281", "holds a line separator (U+2028 LINE SEPARATOR) at character 2"),
        ("x" * 513, "is 513 characters long, over the limit of 512"),
        ("", "is empty"),
    ],
)
def test_an_unsafe_id_is_named_with_the_character_and_where_it_is(value, problem):
    assert id_problem(value) == problem


@pytest.mark.parametrize(
    "value",
    # SciFact (digits), MedQuAD (_ and .), M-BEIR (9:1234), MedICaT (fig2cap:<hash>/<key>), FrenchMedMCQA (<hash>:a),
    # NFCorpus (MED-10), Touche (uuid-date with ':'), DBPedia-entity (<dbpedia:...>), other scripts, 512 characters.
    ["4983", "0000002_1-1.1", "9:1234", "fig2cap:26491ab7/Figure1", "e3ad6a2:a", "MED-10", "c67482ba-2019-04-18T13:32:05Z-00000-000",
     "<dbpedia:Animalia_(book)>", "Beyoncé", "肺炎_3", "x" * 512],
)  # fmt: skip
def test_the_ids_of_the_real_formats_are_safe(value):
    assert id_problem(value) == ""


def test_a_beir_id_with_whitespace_inside_is_refused_naming_file_line_and_id(tmp_path):
    w = write_beir(tmp_path / "src")
    for bad, shown in (("d\t2", r"'d\t2'"), ("d 2", "'d 2'"), ("d\r2", r"'d\r2'"), ("d\u2028 2", r"'d\u2028 2'")):
        jsonl(w.file, [{"_id": "d1", "text": "gout"}, {"_id": bad, "text": "asthma"}])
        with pytest.raises(DataError) as err:
            read("beir", w, tmp_path)
        assert str(err.value).startswith(f"{w.file}:2: '_id' {shown} holds "), str(err.value)
        assert "an id is 1 to 512 printable characters with no whitespace" in str(err.value)
    # Whitespace around an id is stripped, as before (docs: "used as written (stripped)"), and an integer id reads as its digits.
    jsonl(w.file, [{"_id": " d1\n", "text": "gout"}, {"_id": 2, "text": "asthma"}])
    (w.source / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\t2\t1\n")
    assert sorted(read("beir", w, tmp_path).corpus["doc_id"].to_list()) == ["2", "d1"]


def test_an_hf_layout_id_with_a_newline_is_refused_naming_the_parquet_row(tmp_path):
    folder = tmp_path / "ds"
    (folder / "qrels").mkdir(parents=True)
    pl.DataFrame({"_id": ["d1", "d\n2"], "text": ["gout", "asthma"]}).write_parquet(folder / "corpus.parquet")
    jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "toe pain"}])
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    reader = get_reader("mteb")
    with pytest.raises(DataError, match=re.escape(f"{folder / 'corpus.parquet'}: row 2: '_id' 'd\\n2' holds a line feed")):
        reader.read(folder, parse_options(reader, {"name": "t"}, "test"), ReadContext(scratch=tmp_path / "s"))


def test_ids_a_reader_composes_from_its_data_are_held_to_the_rule_too(tmp_path):
    # MedICaT's ids are <direction>:<pdf_hash>/<fig_key>; VQA-RAD's q<qid> and the image's file name.
    w = write_medicat(tmp_path / "medicat")
    rows = [json.loads(line) for line in w.file.read_text().splitlines()]
    rows[0]["fig_key"] = "Figure 1"
    jsonl(w.file, rows)
    with pytest.raises(DataError, match=re.escape(f"{w.file}:1: record key (pdf_hash/fig_key) '") + r".*/Figure 1' holds a space"):
        read("medicat", w, tmp_path)
    v = write_vqa_rad(tmp_path / "vqa")
    records = json.loads((v.source / "vqa_rad.json").read_text())
    records[0]["qid"] = "7\t8"
    (v.source / "vqa_rad.json").write_text(json.dumps(records))
    with pytest.raises(DataError, match=re.escape(f"{v.source / 'vqa_rad.json'}: record 0 (qid '7\\t8'): query id 'q7\\t8' holds a tab")):
        read("vqa_rad", v, tmp_path)


def test_check_task_holds_every_task_to_the_rules_at_one_place():
    meta = TaskMeta(name="t", source="s")
    good = make_task(meta, pl.DataFrame({"query_id": ["q1"], "text": ["a"]}), pl.DataFrame({"doc_id": ["d:1/2"], "text": ["b"]}),
                     pl.DataFrame({"query_id": ["q1"], "doc_id": ["d:1/2"], "relevance": [1000]}))  # fmt: skip
    check_task(good, "task t")
    bad_id = make_task(meta, pl.DataFrame({"query_id": ["q 1"], "text": ["a"]}), good.corpus, good.qrels)
    with pytest.raises(DataError, match=r"^task t: query id 'q 1' holds a space \(U\+0020 SPACE\) at character 2; an id is"):
        check_task(bad_id, "task t")
    negative = make_task(meta, good.queries, good.corpus, good.qrels.with_columns(pl.lit(-1).alias("relevance")))
    with pytest.raises(DataError, match=r"^task t: judgment \(q1, d:1/2\): relevance -1 is not a whole number from 0 to 1000$"):
        check_task(negative, "task t")
    image = make_task(meta, good.queries.with_columns(pl.lit("a\nb.png").alias("image")), good.corpus, good.qrels)
    with pytest.raises(DataError, match=r"^task t: image 'a\\nb.png' holds a line feed"):
        check_task(image, "task t")


def test_image_references_are_printable_file_names():
    assert reference_problem("Anatomy and Physiology/c1.png") == ""  # M3Retrieve's discipline folders have spaces
    assert reference_problem("a\tb.png") == "holds a tab (U+0009) at character 2"
    assert reference_problem("x/" + "n" * 256 + ".png").startswith("has a part 'nnnn")
    assert reference_problem("é" * 125 + ".png") == ""  # 250 + 4 bytes in UTF-8
    assert reference_problem("é" * 126 + ".png") == "has a part '" + "é" * 40 + "'... (130 characters) of 256 bytes, over the 255 a file name may have"


# --- grades ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, grade", [(1, 1), ("2", 2), (1.0, 1), ("1.0", 1), ("0", 0), ("0001", 1), (1000, 1000), ("1000", 1000)])
def test_whole_grades_from_0_to_1000_are_read(raw, grade):
    assert relevance(raw, "f:1") == grade


@pytest.mark.parametrize(
    "raw, message",
    [
        (-1, "f:1: relevance -1 is outside 0..1000 (TREC's negative grades for junk or spam mean not relevant: write them as 0)"),
        ("-1", "f:1: relevance -1 is outside 0..1000 (TREC's negative grades"),
        (1001, "f:1: relevance 1001 is outside 0..1000; grades are whole numbers from 0 to 1000"),
        ("99999999999999999999", "f:1: relevance 99999999999999999999 is outside 0..1000"),
        (10**30, "f:1: relevance 1000000000000000000000000000000 is outside 0..1000"),
        ("9" * 5000, "f:1: relevance 9999999999999999999999999999999999999999... is outside 0..1000"),
        (0.5, "f:1: relevance 0.5 is not an integer"),
        ("1e400", "f:1: relevance '1e400' is not an integer"),
        (True, "f:1: relevance True is not an integer"),
    ],
)
def test_a_grade_out_of_bounds_or_not_whole_is_refused_naming_where(raw, message):
    with pytest.raises(DataError) as err:
        relevance(raw, "f:1")
    assert str(err.value).startswith(message), str(err.value)


def test_qrels_grades_are_bounded_in_every_qrels_format(tmp_path):
    w = write_beir(tmp_path / "beir")
    qrels = w.source / "qrels" / "test.tsv"
    for grade in ("-1", "99999999999999999999"):
        qrels.write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t{grade}\n")
        with pytest.raises(DataError, match=rf"^{qrels}:3: relevance {grade} is outside 0..1000"):
            read("beir", w, tmp_path)
    # M3Retrieve declares float64 scores: 1.0 reads as 1, in its TSV and in a Parquet qrels.
    m3 = write_m3retrieve(tmp_path / "m3")
    assert read("m3retrieve", m3, tmp_path).qrels["relevance"].to_list() == [1, 1]
    folder = tmp_path / "pq"
    (folder / "qrels").mkdir(parents=True)
    jsonl(folder / "corpus.jsonl", [{"_id": "d1", "text": "gout"}])
    jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "toe"}])
    pl.DataFrame({"query-id": ["q1"], "corpus-id": ["d1"], "score": [1.0]}).write_parquet(folder / "qrels" / "test.parquet")
    reader = get_reader("mteb")
    assert reader.read(folder, parse_options(reader, {"name": "t"}, "t"), ReadContext()).qrels["relevance"].to_list() == [1]
    pl.DataFrame({"query-id": ["q1"], "corpus-id": ["d1"], "score": [-2.0]}).write_parquet(folder / "qrels" / "test.parquet")
    with pytest.raises(DataError, match=re.escape(f"{folder / 'qrels' / 'test.parquet'}: row 1: relevance -2.0 is outside 0..1000")):
        reader.read(folder, parse_options(reader, {"name": "t"}, "t"), ReadContext())
    # M-BEIR's qrels.txt (q 0 d grade task_id)
    mb = write_mbeir(tmp_path / "mbeir")
    qtxt = next((mb.source / "qrels").rglob("*.txt"))
    lines = qtxt.read_text().splitlines()
    first = lines[0].split()
    lines[0] = " ".join([first[0], "0", first[2], "-1", *first[4:]])
    qtxt.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"^{qtxt}:1: relevance -1 is outside 0..1000"):
        read("mbeir", mb, tmp_path)


# --- JSON nested too deep -------------------------------------------------------------------------


def test_a_record_nested_200000_deep_is_refused_naming_file_and_line(tmp_path):
    w = write_beir(tmp_path / "src")
    with open(w.file, "a") as f:
        f.write('{"_id": "d3", "text": "x", "metadata": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    with pytest.raises(DataError, match=rf"^{w.file}:3: JSON nested deeper than the parser can read \(RecursionError\)"):
        read("beir", w, tmp_path)
    whole = tmp_path / "test.json"
    whole.write_text('[\n{"id": "q1",\n "x": ' + "[" * 200_000 + "]" * 200_000 + "}]\n")
    with pytest.raises(DataError, match=rf"^{whole}:3: JSON nested deeper"):
        load_json(whole)


# --- links ----------------------------------------------------------------------------------------


def test_a_corpus_file_linked_outside_the_data_folder_is_refused_before_anything_is_read(tmp_path):
    data = tmp_path / "data"
    write_beir(data / "t")
    outside = tmp_path / "elsewhere" / "corpus.jsonl"
    outside.parent.mkdir()
    (data / "t" / "corpus.jsonl").rename(outside)
    (data / "t" / "corpus.jsonl").symlink_to(outside)
    message = rf"^task t: {data / 't' / 'corpus.jsonl'} is a symbolic link to '{outside}' \({outside}\), outside the source folder {data / 't'}"
    with pytest.raises(DataError, match=message):
        build_task(entry("t"), data, tmp_path / "work")
    with pytest.raises(DataError, match=message):  # not even hashed
        curation_inputs(entry("t"), data)


def test_a_task_folder_or_file_linked_outside_the_data_folder_is_refused(tmp_path):
    data, outside = tmp_path / "data", tmp_path / "outside"
    write_beir(outside / "t")
    data.mkdir()
    (data / "t").symlink_to(outside / "t")
    with pytest.raises(DataError, match=rf"^task t: {data / 't'} leads to {outside / 't'}, outside the data folder {data}; links must stay inside it"):
        build_task(entry("t"), data, tmp_path / "work")
    (data / "sub").mkdir()
    (data / "sub" / "deeper").symlink_to(outside)  # a link on the way, not at the end
    with pytest.raises(DataError, match="outside the data folder"):
        build_task(entry("sub/deeper/t"), data, tmp_path / "work")
    p = write_pneumoniamnist(tmp_path / "pn")
    (data / "pn.npz").symlink_to(p.source)
    pn = TaskEntry(name="t", reader="pneumoniamnist", path="pn.npz", options={})
    with pytest.raises(DataError, match="outside the data folder"):
        build_task(pn, data, tmp_path / "work")
    # Named by its absolute path, the same folder is read, and its provenance says where from.
    task = build_task(entry(str(outside / "t")), data, tmp_path / "work")
    assert task.meta.source_path == str(outside / "t") and task.meta.provenance()["source_path"] == str(outside / "t")


def test_links_inside_a_source_folder_are_followed_and_the_task_is_the_same(tmp_path):
    data = tmp_path / "data"
    write_beir(data / "plain")
    write_beir(data / "linked")
    (data / "linked" / "corpus.jsonl").rename(data / "linked" / "corpus-v1.jsonl")
    (data / "linked" / "corpus.jsonl").symlink_to("corpus-v1.jsonl")
    (data / "alias").symlink_to("plain")  # a task folder that is a link within the data folder
    # The same task but for its source text, the folder's name (BEIR's default source)
    hashes = {build_task(entry(p, source="s"), data, tmp_path / "w").content_hash() for p in ("plain", "linked", "alias")}
    assert len(hashes) == 1


def test_an_archive_linked_outside_and_a_fifo_in_a_source_folder_are_refused(tmp_path):
    data = tmp_path / "data"
    w = write_m3retrieve(data / "m3")
    (w.source / "images.zip").rename(tmp_path / "images.zip")
    (w.source / "images.zip").symlink_to(tmp_path / "images.zip")
    m3 = TaskEntry(name="t", reader="m3retrieve", path="m3", options={"subset": "Cardiology"})
    with pytest.raises(DataError, match=rf"{w.source / 'images.zip'} is a symbolic link to .*, outside the source folder"):
        build_task(m3, data, tmp_path / "work")
    (w.source / "images.zip").unlink()
    os.mkfifo(w.source / "Cardiology" / "corpus.jsonl.fifo")
    started = time.monotonic()
    with pytest.raises(DataError, match=r"corpus.jsonl.fifo is not a regular file or folder \(a FIFO, socket or device\)"):
        build_task(m3, data, tmp_path / "work")
    assert time.monotonic() - started < 10


# --- archives -------------------------------------------------------------------------------------


def _zeros_zip(path: Path, size: int, name: str = "big.bin") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open(name, "w", force_zip64=True) as f:
        for _ in range(size >> 20):
            f.write(bytes(1 << 20))
    return path


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.n = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        k = min(len(b), self.n)
        b[:k] = bytes(k)
        self.n -= k
        return k


def test_a_zip_member_that_expands_1000_fold_is_refused_before_anything_is_written(tmp_path):
    bomb = _zeros_zip(tmp_path / "images.zip", 32 << 20)  # 32 MiB of zeros: 32 KB deflated
    packed = zipfile.ZipFile(bomb).getinfo("big.bin").compress_size
    with pytest.raises(DataError) as err:
        safe_extract(bomb, tmp_path / "out")
    assert str(err.value) == (
        f"{bomb}: member 'big.bin' would expand from {packed} to {32 << 20} bytes (ratio {(32 << 20) / packed:.0f}, over the limit of 100); "
        "refusing the archive as a decompression bomb (nothing was extracted)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images.zip"]  # no destination, no temporary sibling


def test_many_small_members_are_held_to_the_ratio_as_a_whole(tmp_path):
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(40):
            zf.writestr(f"z{i}.bin", bytes(512 << 10))  # 512 KiB each, under the 1 MiB floor alone
    with pytest.raises(DataError, match=rf"^{path}: its \d+ bytes would expand to {40 * (512 << 10)} \(ratio \d+, over the limit of 100\)"):
        safe_extract(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz"])
def test_a_compressed_tar_bomb_is_refused_while_it_is_listed(tmp_path, mode):
    path = tmp_path / f"b.tar.{mode[2:]}"
    with tarfile.open(path, mode) as tf:
        info = tarfile.TarInfo("big.bin")
        info.size = 64 << 20
        tf.addfile(info, _Zeros(info.size))
    for call in (lambda: safe_extract(path, tmp_path / "out"), lambda: member_names(path)):
        with pytest.raises(DataError, match=rf"^{path}: its \d+ bytes decompress to more than \d+ \(ratio over the limit of 100\)"):
            call()
    assert not (tmp_path / "out").exists()


def test_the_byte_cap_and_the_free_space_hold_for_plain_archives(tmp_path, monkeypatch):
    data = os.urandom(3 << 20)  # incompressible: ratio 1
    path = tmp_path / "plain.tar"
    with tarfile.open(path, "w") as tf:
        info = tarfile.TarInfo("r.bin")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    monkeypatch.setattr(archives, "MAX_BYTES", 1 << 20)
    with pytest.raises(DataError, match=rf"members total {3 << 20} bytes, over the limit of {1 << 20}"):
        safe_extract(path, tmp_path / "out", max_bytes=archives.MAX_BYTES)

    class Full:
        free = 1000

    monkeypatch.setattr(archives.shutil, "disk_usage", lambda where: Full)
    with pytest.raises(DataError, match=rf"its members need {3 << 20} bytes, and the disk of {tmp_path} has 1000 free"):
        safe_extract(path, tmp_path / "out")
    monkeypatch.undo()
    assert safe_extract(path, tmp_path / "out") == ["r.bin"] and (tmp_path / "out" / "r.bin").read_bytes() == data


def test_m3retrieve_refuses_an_images_zip_bomb_and_keeps_none_of_it(tmp_path):
    w = write_m3retrieve(tmp_path / "m3")
    with zipfile.ZipFile(w.source / "images.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("Cardiology/c1.png", bytes(16 << 20))
        zf.writestr("Cardiology/c2.png", bytes(16))
    with pytest.raises(DataError, match=r"member 'Cardiology/c1.png' would expand from \d+ to 16777216 bytes"):
        read("m3retrieve", w, tmp_path)
    left = [p for p in (tmp_path / "scratch").parent.rglob("*") if p.is_file() and tmp_path / "m3" not in p.parents]
    assert left == []


# --- YAML -----------------------------------------------------------------------------------------

BOMB = "".join(f"{a}: &{a} [{', '.join([f'*{b}'] * 9) if b else ', '.join(['lol'] * 9)}]\n" for a, b in zip("abcdefghi", ["", *"abcdefgh"]))


def test_an_anchor_bomb_is_refused_at_once_naming_the_file(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text(BOMB + "tasks:\n  - {name: x, reader: beir, path: x, query_licence: *i}\n")
    assert len(path.read_bytes()) < 700
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_catalog(path)
    assert time.monotonic() - started < 5
    assert re.fullmatch(
        rf"{path}: its aliases repeat \d+ nodes, over the limit of 100000 \(an anchor bomb\?\); write the values out, or use fewer aliases", str(err.value)
    )


def test_aliases_within_the_bound_merge_keys_and_a_cycle(tmp_path):
    assert load_yaml("base: &b {k1: 1.5, b: 0.75}\nm1: {<<: *b, b: 0.5}\nm2: *b\n", "f") == {
        "base": {"k1": 1.5, "b": 0.75},
        "m1": {"k1": 1.5, "b": 0.5},
        "m2": {"k1": 1.5, "b": 0.75},
    }
    with pytest.raises(DataError, match=r"^f:1: an alias refers to the anchor it is inside \(a cycle\)"):
        load_yaml("a: &a [1, *a]\n", "f")
    lists = "x: &x [" + ", ".join(["1"] * 1000) + "]\n" + "".join(f"y{i}: *x\n" for i in range(99))  # 99 * 1001 = 99099 repeated
    assert len(load_yaml(lists, "f")) == 100
    with pytest.raises(DataError, match="its aliases repeat 101101 nodes, over the limit of 100000"):
        load_yaml(lists + "y99: *x\ny100: *x\n", "f")


def test_a_yaml_file_over_1_mib_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n" + "  # padding\n" * (MAX_YAML_BYTES // 12 + 1))
    size = path.stat().st_size
    started = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^{path}: task catalogue is {size} bytes, over the limit of {MAX_YAML_BYTES} for a YAML file"):
        read_yaml_mapping(path, "task catalogue")
    assert time.monotonic() - started < 1


def test_a_latin1_byte_a_nul_and_deep_nesting_name_the_line(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_bytes(b"tasks:\n  - name: caf\xe9\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: not UTF-8: byte 0xe9 at byte offset 20 \(invalid continuation byte\); re-encode the file as UTF-8$"):
        load_catalog(path)
    path.write_bytes(b"tasks:\n  - name: a\x00b\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: not valid YAML: character U\+0000 is not allowed in YAML"):
        load_catalog(path)
    path.write_text("tasks:\n  - " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: YAML nested deeper than the parser can read \(RecursionError\)$"):
        load_catalog(path)


def test_a_dataset_cards_front_matter_is_bounded_the_same_way(tmp_path):
    (tmp_path / "README.md").write_text("---\n" + BOMB + "---\n# card\n")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'README.md'}: the dataset card's YAML front matter is not valid \(its aliases repeat"):
        dataset_card(tmp_path)
    (tmp_path / "README.md").write_text("---\nlicense: mit\nconfigs: [\n---\n")
    with pytest.raises(DataError, match=r"README.md: the dataset card's YAML front matter is not valid \(line 3: not valid YAML"):
        dataset_card(tmp_path)


# --- names: anchored at the very end --------------------------------------------------------------


def test_a_task_or_model_name_ending_in_a_newline_is_refused(tmp_path):
    from medbench_core.retrieval.model_registry import load_registry

    tasks = tmp_path / "tasks.yaml"
    tasks.write_text('tasks:\n  - {name: "scifact\\n", reader: beir, path: x, query_licence: a, doc_licence: b}\n')
    with pytest.raises(ConfigError, match=re.escape(f"{tasks}: task name 'scifact\\n': use lowercase letters, digits and '_'")):
        load_catalog(tasks)
    tasks.write_text('benchmark: "medbench\\n"\ntasks:\n  - {name: scifact, reader: beir, path: x, query_licence: a, doc_licence: b}\n')
    with pytest.raises(ConfigError, match=re.escape(f"{tasks}: benchmark 'medbench\\n': use letters, digits")):
        load_catalog(tasks)
    models = tmp_path / "models.yaml"
    models.write_text('models:\n  - {name: "bm25x\\n", kind: bm25, revision: r}\n')
    with pytest.raises(ConfigError, match=re.escape(f"{models}: model 'bm25x\\n': use letters, digits")):
        load_registry(models)


def test_no_name_pattern_of_the_project_ends_in_a_dollar():
    # `$` matches before a trailing newline ("bm25x\n" passed `^[a-z0-9]+$`); `\Z` only at the very end.
    found = []
    for folder in ("medbench_core", "runtime", "assets", "orchestration", "medbench_cli", "medbench_release"):
        for path in (ROOT / folder).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), start=1):
                # re.MULTILINE: `$` is each line's end on purpose (a header line of a metadata file).
                if re.search(r"""re\.(compile|match|fullmatch|search)\(r?["'][^"']*\$["']""", line) and "re.MULTILINE" not in line:
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
