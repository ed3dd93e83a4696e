"""Generated expansions from a tiny random-weight causal LM saved as a local folder.

The same seed gives bit-identical texts, another seed other texts; the exact prompt (the
method's template inside the chat template) reaches the model's forward pass; LameR's prompt
carries the upstream run's top passages cut to 512 words; hub ids load only online.
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
from _expansion_fixtures import CHAT_TEMPLATE, ROOT, scifact_subset, tiny_lm

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion import ExpansionSpec
from medbench_core.retrieval.expansion.generate import Generator, cut_words, generator_revision, lamer_passages, render
from medbench_core.retrieval.expansion.stage import build_expansion, expansion_identity

pytestmark = pytest.mark.model

PROMPTS = ROOT / "prompts"
SYSTEM = "You are a helpful assistant."


@pytest.fixture(scope="module")
def task():
    return scifact_subset(n_queries=6, n_other_docs=20)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def gen(lm_dir):
    return Generator(str(lm_dir))


def hyde(lm_dir, **kw) -> ExpansionSpec:
    decoding = {"temperature": 1.0, "top_p": 0.95, "max_new_tokens": 12, "seed": 7, **kw.pop("decoding", {})}
    return ExpansionSpec(name="hyde-tiny", method="hyde", source="generate", generator=str(lm_dir), decoding=decoding, batch_size=4, **kw)


def test_same_seed_same_texts_other_seed_other_texts(task, lm_dir, gen):
    spec = hyde(lm_dir)
    a, info_a = build_expansion(spec, task, prompts_dir=PROMPTS, generator=gen)
    b, info_b = build_expansion(spec, task, prompts_dir=PROMPTS, generator=gen)
    assert a.equals(b) and info_a["key"] == info_b["key"]
    # A freshly loaded model, after other random draws in this process, gives the same texts.
    import torch

    torch.rand(1000)
    c, _ = build_expansion(spec, task, prompts_dir=PROMPTS, generator=Generator(str(lm_dir)))
    assert c.equals(a)
    other, info_o = build_expansion(dataclasses.replace(spec, decoding={**spec.decoding, "seed": 8}), task, prompts_dir=PROMPTS, generator=gen)
    assert info_o["key"] != info_a["key"]
    differ = [q for q, x, y in zip(a["query_id"], a["raw"], other["raw"]) if x != y]
    assert len(differ) == task.queries.height  # sampling over a random model: every text changes
    assert all(t.strip() for t in a["answer"].to_list())
    # Token accounting: 12 new tokens at most per query, summed into info.
    assert a["generated_tokens"].max() <= 12 and info_a["generated_tokens"] == a["generated_tokens"].sum()
    assert info_a["tokens_per_second"] > 0 and info_a["n_queries"] == 6


def test_exact_prompt_reaches_the_model(task, lm_dir, gen):
    """A forward pre-hook records the token ids the model's first (prefill) pass of each batch gets."""
    template = (PROMPTS / "hyde.txt").read_text()
    seen: list[list[list[int]]] = []
    masks: list[list[list[int]]] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] > 1:  # the prefill, not the one-token decoding steps
            seen.append(ids.tolist())
            masks.append(kwargs["attention_mask"].tolist())

    handle = gen.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        frame, _ = build_expansion(hyde(lm_dir), task, prompts_dir=PROMPTS, generator=gen)
    finally:
        handle.remove()

    # Written by hand: the chat template of the fixture wraps the system and user turns.
    queries = task.queries["text"].to_list()
    want_prompts = [f"[system] {SYSTEM}\n[user] {template.replace('{query}', q)}\n[assistant]" for q in queries]
    assert frame["prompt"].to_list() == want_prompts
    tok = gen.tokenizer
    want_ids = sorted(tok(p, add_special_tokens=False)["input_ids"] for p in want_prompts)
    assert len(seen) == 2  # 6 queries in batches of 4
    got = []
    for batch, mask in zip(seen, masks):
        for row, m in zip(batch, mask):
            pad = len(row) - sum(m)
            assert row[:pad] == [tok.pad_token_id] * pad and m[:pad] == [0] * pad  # left padding
            got.append(row[pad:])
    assert sorted(got) == want_ids
    assert frame["prompt_tokens"].to_list() == [len(tok(p, add_special_tokens=False)["input_ids"]) for p in want_prompts]


def test_prompt_template_text_changes_key_and_texts(task, lm_dir, gen, tmp_path):
    (tmp_path / "hyde.txt").write_text("Answer this: {query}")
    spec = hyde(lm_dir)
    base, info = build_expansion(spec, task, prompts_dir=PROMPTS, generator=gen)
    changed, info2 = build_expansion(spec, task, prompts_dir=tmp_path, generator=gen)
    assert info2["key"] != info["key"] and info2["identity"]["prompt"] == "Answer this: {query}"
    assert changed["prompt"][0] == f"[system] {SYSTEM}\n[user] Answer this: {task.queries['text'][0]}\n[assistant]"
    assert not changed["raw"].equals(base["raw"])
    # A per-task template wins over the method's.
    (tmp_path / "hyde").mkdir()
    (tmp_path / "hyde" / f"{task.name}.txt").write_text("Task-specific: {query}")
    assert expansion_identity(spec, task.name, prompts_dir=tmp_path)["prompt"] == "Task-specific: {query}"


def test_lamer_prompt_carries_upstream_passages(task, lm_dir, gen):
    long_doc = task.corpus["doc_id"][0]
    corpus_text = dict(zip(task.corpus["doc_id"].to_list(), task.doc_text()))
    # An upstream run by hand: every query gets the same three documents, the first one padded past 512 words.
    task2 = dataclasses.replace(
        task,
        corpus=task.corpus.with_columns(
            pl.when(pl.col("doc_id") == long_doc).then(pl.col("text") + " " + " ".join(f"w{i}" for i in range(600))).otherwise(pl.col("text")).alias("text")
        ),
        _hash=None,
    )
    docs = task.corpus["doc_id"].to_list()[:3]
    run = pl.DataFrame(
        [(q, d, 3.0 - r, r + 1) for q in task.queries["query_id"].to_list() for r, d in enumerate(reversed(docs))],
        schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int32},
        orient="row",
    )
    passages = lamer_passages(run, task2, k=2, words=512)
    text2 = dict(zip(task2.corpus["doc_id"].to_list(), task2.doc_text()))
    want = f"\n[1]. {cut_words(text2[docs[2]], 512)}\n[2]. {cut_words(text2[docs[1]], 512)}"  # R2MED's generate_hypothetical_doc.py lines 52-58
    assert passages[task.queries["query_id"][0]] == want
    assert len(cut_words(text2[long_doc], 512).split()) == 512 and corpus_text[long_doc] != text2[long_doc]

    spec = ExpansionSpec(
        name="lamer-tiny",
        method="lamer",
        source="generate",
        generator=str(lm_dir),
        upstream="bm25",
        upstream_k=2,
        decoding={"max_new_tokens": 4, "seed": 1},
        batch_size=3,
    )
    frame, info = build_expansion(spec, task2, prompts_dir=PROMPTS, upstream_run=run, upstream_run_key="run-key-1", generator=gen)
    template = (PROMPTS / "lamer.txt").read_text()
    q0 = task2.queries["text"][0]
    assert frame["prompt"][0] == f"[system] {SYSTEM}\n[user] {render(template, q0, want)}\n[assistant]"
    assert info["identity"]["upstream_run"] == "run-key-1"
    other = expansion_identity(spec, task2.name, prompts_dir=PROMPTS, upstream_run_key="run-key-2")
    assert other["upstream_run"] == "run-key-2" and other != info["identity"]
    with pytest.raises(DataError, match="lamer needs the upstream run of 'bm25'"):
        build_expansion(spec, task2, prompts_dir=PROMPTS, upstream_run_key="k", generator=gen)


def test_revision_hashes_weights_and_chat_template(lm_dir, tmp_path):
    import shutil

    spec = hyde(lm_dir)
    copy = tmp_path / "copy"
    shutil.copytree(lm_dir, copy)
    assert generator_revision(dataclasses.replace(spec, generator=str(copy))) == generator_revision(spec)
    (copy / "chat_template.jinja").write_text(CHAT_TEMPLATE.replace("[assistant]", "[bot]"))
    assert generator_revision(dataclasses.replace(spec, generator=str(copy))) != generator_revision(spec)
    # Prompts are chat turns: a tokenizer without a chat template is refused, not guessed at.
    (copy / "chat_template.jinja").unlink()
    with pytest.raises(DataError, match="its tokenizer has no chat template"):
        Generator(str(copy))


def test_hub_ids_only_online_and_pinned(lm_dir):
    with pytest.raises(DataError, match="not a local folder; a hub id loads only with online=True"):
        Generator("Qwen/Qwen2.5-0.5B-Instruct")
    spec = ExpansionSpec(name="hub", method="hyde", source="generate", generator="Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(DataError, match="pin its 'revision'"):
        generator_revision(spec)
    assert generator_revision(dataclasses.replace(spec, revision="a" * 40)) == "a" * 40
    with pytest.raises(DataError, match="no such folder"):
        Generator("./no/such/folder")
