"""Kind ``colbert``: a ColBERT model in pylate's saved layout, encoded as pylate encodes it, scored by MaxSim.

A pylate model folder (``pylate.models.ColBERT(...).save(folder)``) holds ``modules.json`` (a
sentence-transformers ``Transformer`` and one or more ``Dense`` projections),
``config_sentence_transformers.json`` (``query_prefix`` ``"[Q] "``, ``document_prefix`` ``"[D] "``,
``query_length`` 32, ``document_length`` 180, ``do_query_expansion``, ``attend_to_expansion_tokens``,
``skiplist_words``) and the transformer with its tokenizer. pylate itself is not used: its releases
that install beside this lock's sentence-transformers 6.x do not import (pylate 1.0.0), and every
later release pins sentence-transformers 3.x-5.x exactly. What it does is done here with
transformers and safetensors, read in pylate 1.6.0 ``pylate/models/colbert.py``
(github.com/lightonai/pylate; ``ColBERT.tokenize``, ``ColBERT.encode``, ``insert_prefix_token``,
``skiplist_mask``) and ``pylate/models/Dense.py``:

- texts are stripped (sentence-transformers ``Transformer.tokenize``), tokenized to
  ``length - 1`` tokens, and the prefix token's id is inserted after ``[CLS]`` (attention 1);
- queries are padded to ``query_length`` with the ``[MASK]`` token (query expansion); those
  positions are masked in attention (unless ``attend_to_expansion_tokens``) but their output
  vectors are kept: a query always has ``query_length`` vectors;
- documents are padded to the longest of their batch; tokens in the skiplist (punctuation) and
  padding are dropped;
- the transformer's last hidden state goes through the Dense layers (``activation(x W^T + b)``,
  plus the residual when ``use_residual``) and each token vector is L2-normalised.

Tested against pylate 1.6.0 called directly (its outputs recorded by
``bench/record_pylate_reference.py`` on a tiny ColBERT built from the bundled MiniLM).
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.late_interaction import LateInteractionKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.weights import DTYPES

PYLATE_DEFAULTS = {
    "query_prefix": "[Q] ",
    "document_prefix": "[D] ",
    "query_length": 32,
    "document_length": 180,
    "do_query_expansion": True,
    "attend_to_expansion_tokens": False,
    "skiplist_words": list(string.punctuation),
}  # fmt: skip  (pylate/models/colbert.py ColBERT.__init__, when the folder's config gives none)
DENSE_TYPES = ("pylate.models.Dense.Dense", "pylate.models.Dense", "sentence_transformers.models.Dense", "sentence_transformers.models.Dense.Dense")
ACTIVATIONS = {"torch.nn.modules.linear.Identity": lambda x: x, "torch.nn.modules.activation.Tanh": np.tanh}


@dataclass(frozen=True)
class ColbertSettings(KindSettings):
    """pylate's encoding settings; each left null is read from the model folder's ``config_sentence_transformers.json``."""

    query_prefix: str | None = None
    document_prefix: str | None = None
    query_length: int | None = None
    document_length: int | None = None
    do_query_expansion: bool | None = None
    attend_to_expansion_tokens: bool | None = None
    skiplist_words: list | None = None
    dtype: str | None = None

    CHOICES = {"dtype": (None, *DTYPES)}
    QUERY_ONLY = ("query_prefix", "query_length", "do_query_expansion", "attend_to_expansion_tokens")
    HINTS = {
        "pooling": "ColBERT keeps one vector per token (late interaction); there is no pooling",
        "instructions": "ColBERT queries take no instruction; give a query_prefix",
        "max_length": "use query_length and document_length (pylate's names)",
    }

    def check(self, where: str) -> None:
        for name in ("query_length", "document_length"):
            value = getattr(self, name)
            if value is not None and value < 2:
                raise DataError(f"{where}: {name} must be at least 2 (the prefix token and one more), not {value}")


def _read_json(path: Path, what: str) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the {what} ({exc})") from exc
    if not isinstance(doc, (dict, list)):
        raise DataError(f"{path}: the {what} is not a JSON object")
    return doc


class ColbertEncoder:
    """A pylate-format ColBERT loaded with transformers; :meth:`encode_multi` gives pylate's token vectors."""

    def __init__(self, spec: ModelSpec, folder: Path, device: str = "cpu", progress: bool | None = False):
        import torch
        from safetensors.numpy import load_file
        from transformers import AutoModel, AutoTokenizer

        from medbench_core.progress import library_bars
        from medbench_core.retrieval.weights import check_remote_code, torch_dtype

        self.spec, self.device, self._torch = spec, device, torch
        modules = _read_json(folder / "modules.json", "modules list") if (folder / "modules.json").is_file() else None
        if not isinstance(modules, list) or not modules or not str(modules[0].get("type", "")).endswith("Transformer"):
            raise DataError(f"model {spec.name}: {folder} is not a pylate ColBERT folder (modules.json with a Transformer then Dense layers)")
        base = folder / modules[0].get("path", "")
        cfg_path = folder / "config_sentence_transformers.json"
        cfg = _read_json(cfg_path, "ColBERT settings") if cfg_path.is_file() else {}
        chosen = {k: getattr(spec.settings, k) if getattr(spec.settings, k) is not None else cfg.get(k, v) for k, v in PYLATE_DEFAULTS.items()}
        if cfg.get("default_prompt_name") or any(cfg.get("prompts", {}).values()):
            raise DataError(f"model {spec.name}: {cfg_path} sets sentence-transformers prompts; pylate would prepend them and medbench does not")
        self.query_prefix, self.document_prefix = chosen["query_prefix"], chosen["document_prefix"]
        self.query_length, self.document_length = int(chosen["query_length"]), int(chosen["document_length"])
        self.expansion = bool(chosen["do_query_expansion"])
        self.attend_expansion = bool(chosen["attend_to_expansion_tokens"]) and self.expansion
        sbert = base / "sentence_bert_config.json"
        self.lower = bool(_read_json(sbert, "sentence-transformers config").get("do_lower_case", False)) if sbert.is_file() else False
        check_remote_code(spec, base)
        try:
            with library_bars(progress):
                self.tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
                model = AutoModel.from_pretrained(str(base), local_files_only=True, trust_remote_code=spec.trust_remote_code)
        except (OSError, ValueError) as exc:
            raise DataError(f"model {spec.name}: cannot load {base} ({exc})") from exc
        vocab = self.tokenizer.get_vocab()
        for role, prefix in (("query", self.query_prefix), ("document", self.document_prefix)):
            if prefix and prefix not in vocab:
                raise DataError(
                    f"model {spec.name}: the tokenizer of {base} has no token {prefix!r} ({role}_prefix); pylate adds it with new random "
                    "embeddings when it builds a model: load and save the model with pylate once, or set the prefix to a token it has"
                )
        self.prefix_id = {"query": vocab.get(self.query_prefix) if self.query_prefix else None,
                          "passage": vocab.get(self.document_prefix) if self.document_prefix else None}  # fmt: skip
        # pylate pads with [MASK] (an MLM), else end-of-sequence (ColBERT.__init__)
        pad = self.tokenizer.mask_token or self.tokenizer.eos_token
        if pad:
            self.tokenizer.pad_token = pad
        elif self.tokenizer.pad_token is None:
            raise DataError(f"model {spec.name}: the tokenizer has no [MASK], end-of-sequence or padding token to expand queries with")
        self.skiplist = np.asarray([self.tokenizer.convert_tokens_to_ids(w) for w in chosen["skiplist_words"]], dtype=np.int64)
        self.dense: list[tuple[np.ndarray, np.ndarray | None, Any, np.ndarray | None]] = []
        for entry in modules[1:]:
            if entry.get("type") not in DENSE_TYPES:
                raise DataError(
                    f"model {spec.name}: module {entry.get('type')!r} in {folder / 'modules.json'} is not a Dense layer; "
                    "ColBERT is a Transformer then Dense layers"
                )
            sub = folder / entry.get("path", "")
            conf = _read_json(sub / "config.json", "Dense config")
            act = conf.get("activation_function", "torch.nn.modules.linear.Identity")
            if act not in ACTIVATIONS:
                raise DataError(f"model {spec.name}: {sub / 'config.json'}: activation {act!r} is not one of {sorted(ACTIVATIONS)}")
            if not (sub / "model.safetensors").is_file():
                raise DataError(f"model {spec.name}: {sub} has no model.safetensors (a pickled Dense layer is not loaded)")
            w = load_file(str(sub / "model.safetensors"))
            residual = w.get("residual.weight") if conf.get("use_residual") else None
            self.dense.append(
                (w["linear.weight"], w.get("linear.bias"), ACTIVATIONS[act], residual if residual is not None else (True if conf.get("use_residual") else None))
            )
        dtype = torch_dtype(spec)
        if dtype is not None:
            model = model.to(dtype)
        self.model = model.to(device).eval()

    def _tokenize(self, texts: list[str], role: str) -> dict[str, Any]:
        torch = self._torch
        prefix = self.prefix_id[role]
        length = self.query_length if role == "query" else self.document_length
        texts = [str(t).strip() for t in texts]
        if self.lower:
            texts = [t.lower() for t in texts]
        pad = "max_length" if role == "query" and self.expansion else True
        feats = dict(
            self.tokenizer(texts, padding=pad, truncation="longest_first", max_length=length - 1 if prefix is not None else length, return_tensors="pt")
        )
        if prefix is not None:
            insert = lambda t, v: torch.cat([t[:, :1], torch.full((t.shape[0], 1), v, dtype=t.dtype), t[:, 1:]], dim=1)  # noqa: E731
            feats["input_ids"] = insert(feats["input_ids"], prefix)
            feats["attention_mask"] = insert(feats["attention_mask"], 1)
            if "token_type_ids" in feats:
                feats["token_type_ids"] = insert(feats["token_type_ids"], 0)
        if role == "query" and self.attend_expansion:
            feats["attention_mask"].fill_(1)
        return feats

    def _project(self, hidden: np.ndarray) -> np.ndarray:
        for weight, bias, act, residual in self.dense:
            out = act(hidden @ weight.T + (bias if bias is not None else 0.0))
            if residual is True:
                out = out + hidden
            elif residual is not None:
                out = out + hidden @ residual.T
            hidden = out
        return hidden

    def encode_multi(self, texts, images, languages, role, ids=None, instruction=None) -> list[np.ndarray]:
        """One ``(tokens, dim)`` array of unit vectors per text, as pylate's ``encode`` returns them."""
        torch = self._torch
        names = [str(x) for x in ids] if ids is not None else [f"{role} record at position {i}" for i in range(len(texts))]
        missing = [names[i] for i, t in enumerate(texts) if not (isinstance(t, str) and t.strip())]
        if missing:
            raise DataError(f"model {self.spec.name} reads text only, but {len(missing)} {role} record(s) have no text (e.g. {missing[0]})")
        out: list[np.ndarray] = []
        step = max(1, int(self.spec.batch_size))
        with torch.inference_mode():
            for start in range(0, len(texts), step):
                feats = self._tokenize(list(texts[start : start + step]), role)
                keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in feats]
                hidden = self.model(**{k: feats[k].to(self.device) for k in keys}).last_hidden_state.float().cpu().numpy()
                emb = self._project(hidden)
                ids_np, att = feats["input_ids"].numpy(), feats["attention_mask"].numpy().astype(bool)
                if role == "query":
                    keep = np.ones_like(att) if self.expansion else att
                else:
                    keep = att & ~np.isin(ids_np, self.skiplist)
                for row, mask in zip(emb, keep):
                    vecs = row[mask.astype(bool)]
                    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)  # torch.nn.functional.normalize's eps
                    out.append(np.ascontiguousarray(vecs, dtype=np.float32))
        return out


class ColbertKind(LateInteractionKind):
    name = "colbert"
    packages = ("torch", "transformers", "tokenizers", "safetensors")
    Settings = ColbertSettings
    version = "1"
    needs_path = True
    reads = frozenset({"text"})

    def hub_id(self, spec: ModelSpec) -> str:
        from medbench_core.hub import is_repo_id

        return spec.path if is_repo_id(spec.path) else ""

    def revision(self, spec: ModelSpec) -> str:
        from medbench_core.retrieval.kinds.dense import resolve_revision_of_path

        return resolve_revision_of_path(spec)

    def long_text_params(self, spec: ModelSpec, model: Any = None) -> dict[str, Any]:
        length = spec.settings.document_length or (model.document_length if model is not None else None)
        return {"long_text": "truncate", "max_length": length}

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "framework": ["PyLate", "PyTorch"], "open_weights": True if self.hub_id(spec) else None}

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        from medbench_core.retrieval.weights import model_folder

        return ColbertEncoder(spec, model_folder(spec, online=online), device=device, progress=progress)


KIND = ColbertKind()
