"""One task's contamination audit: its near-duplicate texts and images in every other task of the
benchmark and in every training manifest a model declares, stored once per task and inputs.

The audit of task T compares T's queries and documents (texts: :mod:`.texts`; images:
:mod:`medbench_core.taskdata.image_hashes`) with

- each other task's queries and documents (``source`` ``task:<name>``),
- T's own images against each other, queries with queries and documents with documents (``task:T``:
  PneumoniaMNIST val against test, with their splits),
- each declared manifest (``texts:<path>``, ``images:<path>``).

It writes ``pairs.parquet`` (one row per pair found: kind, T's side and id, source, the other
side and id, Jaccard or the two Hamming distances, exact, splits), ``info.json`` (counts,
thresholds, sources with their hashes) and ``thumbs/`` (the first image pairs side by side).
Which pairs count against a model is decided per cell (:mod:`.cells`), so one audit serves every
model. The key (:func:`audit_key`) hashes T's content, every other task's, every manifest's bytes,
the thresholds and the stage version: the same inputs reuse it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation.contamination import texts as tx
from medbench_core.provenance import artifact_key, stage_version
from medbench_core.storage import is_complete, sha256_file, write_manifest
from medbench_core.taskdata import image_hashes as ih

STAGE = "contamination"
FILES = ("pairs.parquet", "info.json")
PAIRS_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.Utf8, "side": pl.Utf8, "id": pl.Utf8, "split": pl.Utf8, "source": pl.Utf8, "other_side": pl.Utf8, "other_id": pl.Utf8,
    "other_split": pl.Utf8, "jaccard": pl.Float64, "phash_distance": pl.Int32, "dhash_distance": pl.Int32, "exact": pl.Boolean,
}  # fmt: skip
SPLITS = ("train", "val", "valid", "dev", "test")
THUMBS = 24  # image pairs drawn side by side


def settings() -> dict[str, Any]:
    """The audit's thresholds, as its key and its info record them."""
    return {
        "shingle": f"character {tx.SHINGLE}-grams of the normalised text",
        "jaccard_threshold": tx.JACCARD_THRESHOLD,
        "num_perm": tx.NUM_PERM,
        "minhash": "datasketch affine32, seed 1",
        "phash_max": ih.PHASH_MAX,
        "dhash_max": ih.DHASH_MAX,
    }


def audit_key(task: Any, others: Sequence[Any], manifests: Sequence[tuple[str, str]]) -> str:
    """The audit artifact's key: the stage version, the thresholds, T's content hash, each other task's and each manifest's sha256."""
    return artifact_key(
        stage=STAGE,
        version=stage_version(STAGE),
        settings=settings(),
        task=task.content_hash(),
        others={o.name: o.content_hash() for o in others},
        manifests={f"{k}:{p}": sha256_file(p) if Path(p).is_file() else "missing" for k, p in manifests},
    )


def item_split(item_id: str, default: str) -> str:
    """The split an item belongs to: a ``<split>_`` prefix of its id (PneumoniaMNIST's ``val_0001``), else the task's split."""
    head = str(item_id).split("_", 1)[0].lower()
    return head if head in SPLITS and "_" in str(item_id) else default


_TEXTS: dict[tuple[str, str], list[tx.TextSet]] = {}  # (task, content hash) -> its text sets, kept per process
_SIGNATURES: dict[tuple[str, str], dict[str, np.ndarray]] = {}  # (task, content hash) -> side -> its non-empty texts' signatures
BLOCK_TEXTS = 10_000  # a task's own texts audited at a time: normalised, signed, looked up, then dropped


def _forget_older(cache: dict, key: tuple[str, str]) -> None:
    for old in [k for k in cache if k[0] == key[0] and k != key]:
        del cache[old]


def task_texts(task: Any) -> list[tx.TextSet]:
    """The task's query texts and document texts (title and text) as two :class:`~.texts.TextSet`.

    Kept per process by content hash: ``medbench run`` audits every task in one process, and each
    audit compares with every other task, whose signatures are computed once (or taken from its own audit's blocks)."""
    key = (task.name, task.content_hash())
    if key not in _TEXTS:
        _forget_older(_TEXTS, key)
        signed = _SIGNATURES.get(key, {})
        _TEXTS[key] = [tx.text_set(f"task:{task.name}", side, *_side_texts(_side_frame(task, side), side), signed.get(side)) for side in ("query", "doc")]
        _SIGNATURES[key] = {s.side: s.sigs for s in _TEXTS[key]}
    return _TEXTS[key]


def _side_frame(task: Any, side: str) -> pl.DataFrame:
    """The task's queries with a text (``query``) or its documents (``doc``)."""
    return task.queries.filter(pl.col("text").is_not_null()) if side == "query" else task.corpus


def _side_texts(frame: pl.DataFrame, side: str) -> tuple[list, list]:
    """The ids and raw texts of a frame of :func:`_side_frame` (a document's: its title and text)."""
    if side == "query":
        return frame["query_id"].to_list(), frame["text"].to_list()
    ids = frame["doc_id"].to_list()
    titles = frame["title"].to_list() if "title" in frame.columns else [None] * len(ids)
    bodies = frame["text"].to_list() if "text" in frame.columns else [None] * len(ids)
    return ids, [" ".join(p for p in (a, b) if p) for a, b in zip(titles, bodies)]


def _task_blocks(task: Any, block: int):
    """The task's texts as :class:`~.texts.TextSet` of at most ``block`` rows each (queries, then documents), without keeping the texts.

    Its signatures are kept (:data:`_SIGNATURES`: 512 bytes a text) for the audits that compare other tasks with it;
    texts already kept (:func:`task_texts`) are used as they are."""
    key = (task.name, task.content_hash())
    if key in _TEXTS:
        yield from _TEXTS[key]
        return
    _forget_older(_SIGNATURES, key)
    signed = _SIGNATURES.get(key)
    made: dict[str, list[np.ndarray]] = {"query": [], "doc": []}
    done = {"query": 0, "doc": 0}  # non-empty texts signed so far per side: where the next block's stored signatures start
    for side in ("query", "doc"):
        frame = _side_frame(task, side)
        for lo in range(0, frame.height, block):
            kept_ids, texts = tx.kept_texts(*_side_texts(frame.slice(lo, block), side))
            if signed:
                sigs = signed[side][done[side] : done[side] + len(texts)]
            else:
                sigs = tx.signatures(texts)
                made[side].append(sigs)
            done[side] += len(texts)
            yield tx.TextSet(f"task:{task.name}", side, kept_ids, texts, sigs)
    if not signed:
        _SIGNATURES[key] = {s: np.concatenate(m) if m else np.zeros((0, tx.NUM_PERM), dtype=np.uint32) for s, m in made.items()}


def task_images(task: Any, split: str) -> list[tuple[str, str, str, ih.ImageHashes]]:
    """(side, id, split, hashes) of every image of the task (queries and documents), hashed from the curated files."""
    out = []
    for frame, side, key in ((task.queries, "query", "query_id"), (task.corpus, "doc", "doc_id")):
        if "image" not in frame.columns:
            continue
        for rid, ref in frame.select(key, "image").drop_nulls("image").iter_rows():
            out.append((side, str(rid), item_split(rid, split), ih.hash_file(task.resolve_image(ref), f"task {task.name} {side} {rid}")))
    return out


def read_text_manifest(path: str) -> tx.TextSet:
    """A texts manifest: one text per line (.txt) or JSON lines with ``text`` (and an optional ``id``; .jsonl); ids are line numbers otherwise."""
    ids, raw = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if path.endswith(".jsonl"):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f'{path}:{n}: not a JSON object ({exc.msg}); a .jsonl texts manifest holds one {{"text": ...}} per line') from None
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    raise DataError(f"{path}:{n}: no string 'text' field; a .jsonl texts manifest holds one {{\"text\": ...}} per line")
                ids.append(str(obj.get("id", f"line {n}")))
                raw.append(obj["text"])
            else:
                ids.append(f"line {n}")
                raw.append(line.rstrip("\n"))
    return tx.text_set(f"texts:{path}", "text", ids, raw)


def read_image_manifest(path: str) -> list[tuple[str, ih.ImageHashes]]:
    """An images manifest: per line an image path (relative to the manifest) or ``<phash hex> <dhash hex>``; (line id, hashes)."""
    out = []
    base = Path(path).parent
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            hashes = ih.parse_hashes(line)
            if hashes is None:
                file = Path(line) if Path(line).is_absolute() else base / line
                if not file.is_file():
                    raise DataError(f"{path}:{n}: {line!r} is neither an image file (relative to the manifest) nor '<phash hex> <dhash hex>'")
                hashes = ih.hash_file(file, f"{path}:{n}")
            out.append((f"line {n}", hashes))
    return out


def audit_task(
    task: Any, others: Sequence[Any], manifests: Sequence[tuple[str, str]], *, splits: Mapping[str, str] | None = None, block: int = BLOCK_TEXTS
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The pairs and the info of task ``task``'s audit (module docstring), every source compared afresh; ``splits``: task ->
    its catalogue split (default test). :func:`compose_audit` gives the same audit from stored per-source pieces."""
    pairs, info, _ = compose_audit(task, others, manifests, splits=splits, block=block)
    return pairs, info


def compose_audit(
    task: Any,
    others: Sequence[Any],
    manifests: Sequence[tuple[str, str]],
    *,
    splits: Mapping[str, str] | None = None,
    block: int = BLOCK_TEXTS,
    piece_dir: Callable[[str, str], Path] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any], dict[str, list[str]]]:
    """The audit of ``task`` (pairs, info: as :func:`audit_task`'s) put together from one piece per source, and which
    pieces were ``reused``, ``swapped`` or ``computed`` (source labels).

    A piece is T's pairs against one source (another task, a manifest, T's own images), stored by :func:`piece_key`
    under ``piece_dir(task name, key)`` when ``piece_dir`` is given. The pairs of T against task F are F's piece
    against T with its sides swapped (:func:`swap_piece`): a text pair is an LSH candidate when one band of the two
    signatures is equal and is kept when the exact Jaccard of the two shingle sets reaches the threshold, an image
    pair when both Hamming distances are within theirs (or the pixels equal): each a property of the pair alone,
    the same both ways round and whatever else is in the index. So adding task F computes F's pieces once and
    every other task's audit takes its piece against F from F's. The task's own texts are audited ``block`` rows
    at a time (:func:`_task_blocks`): the pairs are the same for any block."""
    t0 = time.perf_counter()
    splits = dict(splits or {})
    split = splits.get(task.name) or "test"
    sources = _piece_sources(task, others, manifests)
    got: dict[str, pl.DataFrame] = {}
    ledger: dict[str, list[str]] = {"reused": [], "swapped": [], "computed": []}
    if piece_dir is not None:
        for label, digest in sources.items():
            folder = piece_dir(task.name, piece_key(task.content_hash(), label, digest))
            if is_complete(folder):
                got[label] = pl.read_parquet(folder / PIECE_FILE)
                ledger["reused"].append(label)
        for o in others:
            label = f"task:{o.name}"
            if label in got:
                continue
            folder = piece_dir(o.name, piece_key(o.content_hash(), f"task:{task.name}", task.content_hash()))
            if is_complete(folder):
                got[label] = swap_piece(pl.read_parquet(folder / PIECE_FILE), f"task:{o.name}")
                ledger["swapped"].append(label)
    own = f"task:{task.name}"
    missing = [label for label in sources if label not in got]
    if missing:
        made = _compute_pieces(task, [o for o in others if f"task:{o.name}" in missing], [m for m in manifests if f"{m[0]}:{m[1]}" in missing],
                               own in missing, block)  # fmt: skip
        for label in missing:
            got[label] = made[label]
            ledger["computed"].append(label)
            if piece_dir is not None and (label != own or _image_count(task)):  # a task's own piece without images: empty and free
                store_piece(piece_dir(task.name, piece_key(task.content_hash(), label, sources[label])), made[label])
    pairs = _with_splits(pl.concat([got[label] for label in sources], how="vertical"), task.name, split, splits)
    info = {
        "task": task.name,
        "settings": settings(),
        "n_queries": task.queries.height,
        "n_docs": task.corpus.height,
        "n_images": _image_count(task),
        "others": sorted(o.name for o in others),
        "manifests": [{"kind": k, "path": p, "sha256": sha256_file(p)} for k, p in manifests],
        "pairs": {f"{s}": n for s, n in pairs.group_by("source").len().iter_rows()} if pairs.height else {},
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return pairs, info, ledger


PIECE_FILE = "pairs.parquet"
PIECE_SCHEMA = {k: v for k, v in PAIRS_SCHEMA.items() if k not in ("split", "other_split")}  # splits are the catalogue's: put on when composed
_PIECE_ORDER = ("kind", "side", "id", "source", "other_side", "other_id")


def piece_key(task_hash: str, source: str, source_hash: str) -> str:
    """The key of the piece of a task (its content hash) against one source (its label and content hash or sha256)."""
    return artifact_key(stage=STAGE, piece=True, version=stage_version(STAGE), settings=settings(), task=task_hash, source=source, source_hash=source_hash)


def _piece_sources(task: Any, others: Sequence[Any], manifests: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Source label -> its content hash (a task's) or its bytes' sha256 (a manifest's; ``missing`` when absent): the pieces of the audit."""
    out = {f"task:{o.name}": o.content_hash() for o in others}
    out.update({f"{k}:{p}": sha256_file(p) if Path(p).is_file() else "missing" for k, p in manifests if k in ("texts", "images")})
    out[f"task:{task.name}"] = task.content_hash()  # its own images against each other
    return out


def swap_piece(piece: pl.DataFrame, source: str) -> pl.DataFrame:
    """Task F's piece against task T seen from T: each pair's two sides exchanged, its source ``source`` (``task:F``)."""
    return piece.select(
        "kind",
        pl.col("other_side").alias("side"),
        pl.col("other_id").alias("id"),
        pl.lit(source, pl.Utf8).alias("source"),
        pl.col("side").alias("other_side"),
        pl.col("id").alias("other_id"),
        "jaccard",
        "phash_distance",
        "dhash_distance",
        "exact",
    ).sort(*_PIECE_ORDER)


def store_piece(folder: Path, piece: pl.DataFrame) -> Path:
    """Write one piece atomically with its manifest."""
    from medbench_core.storage import replace_dir_atomic

    def build(tmp: Path) -> None:
        piece.write_parquet(tmp / PIECE_FILE, statistics=False)
        write_manifest(tmp, [PIECE_FILE], {})

    return replace_dir_atomic(folder, build)


def _compute_pieces(task: Any, others: Sequence[Any], manifests: Sequence[tuple[str, str]], own: bool, block: int) -> dict[str, pl.DataFrame]:
    """The pieces of ``task`` against ``others``, ``manifests`` and (``own``) its own images, computed: one LSH index over
    every text compared (a candidate is a property of the pair, so one index gives each source's pairs as its own would)."""
    rows: dict[str, list[dict[str, Any]]] = {f"task:{o.name}": [] for o in others}
    rows.update({f"{k}:{p}": [] for k, p in manifests if k in ("texts", "images")})
    if own:
        rows[f"task:{task.name}"] = []
    other_texts = [s for o in others for s in task_texts(o)]
    text_manifests = [read_text_manifest(p) for k, p in manifests if k == "texts"]
    compared = [s for s in (*other_texts, *text_manifests) if s.ids]
    # Texts are compared with other tasks and manifests only (never within the task): with nothing to compare them
    # with, the task's own texts are neither normalised nor MinHashed (one task, no manifest: the audit is its counts).
    index = tx.LshIndex(compared) if compared else None
    for probe in _task_blocks(task, block) if index else ():
        for r in index.pairs(probe):
            rows[r["source"]].append({"kind": "text", **r})
    image_sources = own or others or any(k == "images" for k, _ in manifests)
    images = task_images(task, "test") if image_sources and _image_count(task) else []
    if images:
        hashes = [h for *_, h in images]
        if own:
            for i, j, dp, dd, exact in ih.close_pairs(hashes, hashes, same=True):
                a, b = images[i], images[j]
                if a[0] != b[0]:
                    continue  # a figure that is a query (figure -> caption) and a document (caption -> figure) of one task is by design
                rows[f"task:{task.name}"].append(_piece_image_row(a, f"task:{task.name}", b[0], b[1], dp, dd, exact))
        for o in others:
            theirs = task_images(o, "test")
            for i, j, dp, dd, exact in ih.close_pairs(hashes, [h for *_, h in theirs]):
                rows[f"task:{o.name}"].append(_piece_image_row(images[i], f"task:{o.name}", theirs[j][0], theirs[j][1], dp, dd, exact))
        for k, p in manifests:
            if k != "images":
                continue
            listed = read_image_manifest(p)
            for i, j, dp, dd, exact in ih.close_pairs(hashes, [h for _, h in listed]):
                rows[f"images:{p}"].append(_piece_image_row(images[i], f"images:{p}", "image", listed[j][0], dp, dd, exact))
    return {label: (pl.DataFrame(r, schema=PIECE_SCHEMA) if r else pl.DataFrame(schema=PIECE_SCHEMA)).sort(*_PIECE_ORDER) for label, r in rows.items()}


def _piece_image_row(a: tuple, source: str, other_side: str, other_id: str, dp: int, dd: int, exact: bool) -> dict[str, Any]:
    return {"kind": "image", "side": a[0], "id": a[1], "source": source, "other_side": other_side, "other_id": other_id,
            "jaccard": None, "phash_distance": dp, "dhash_distance": dd, "exact": exact}  # fmt: skip


def _with_splits(pieces: pl.DataFrame, name: str, split: str, splits: Mapping[str, str]) -> pl.DataFrame:
    """The audit's pairs from its pieces: each row's split and the other side's (:func:`item_split`; a text's is the
    task's split, the other side's none; a manifest's image has none), in the audit's column order, sorted."""
    rows = []
    for r in pieces.iter_rows(named=True):
        if r["kind"] == "text":
            r["split"], r["other_split"] = split, None
        else:
            r["split"] = item_split(r["id"], split)
            source = r["source"]
            if source.startswith("task:"):
                theirs = source[len("task:") :]
                r["other_split"] = item_split(r["other_id"], split if theirs == name else splits.get(theirs) or "test")
            else:
                r["other_split"] = None
        rows.append(r)
    pairs = pl.DataFrame(rows, schema=PAIRS_SCHEMA) if rows else pl.DataFrame(schema=PAIRS_SCHEMA)
    # The measures after the names: two rows alike in every name (a manifest's ids repeated) in one order, however they came.
    return pairs.sort(*_PIECE_ORDER, "jaccard", "phash_distance", "dhash_distance", "exact", nulls_last=False)


def _image_count(task: Any) -> int:
    """The task's images (queries' and documents'): as many as :func:`task_images` hashes, without reading them."""
    return sum(f["image"].drop_nulls().len() for f in (task.queries, task.corpus) if "image" in f.columns)


def store_audit(folder: str | Path, pairs: pl.DataFrame, info: dict[str, Any], task: Any, others: Sequence[Any], extra: dict[str, Any]) -> Path:
    """Write the audit into ``folder`` atomically with its manifest, with ``thumbs/`` of its first image pairs."""
    from medbench_core.storage import replace_dir_atomic

    def build(tmp: Path) -> None:
        pairs.write_parquet(tmp / "pairs.parquet", statistics=False)
        (tmp / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")
        drawn = draw_thumbs(pairs, task, others, tmp / "thumbs")
        write_manifest(tmp, [*FILES, *drawn], extra)

    return replace_dir_atomic(folder, build)


def load_audit(folder: str | Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The pairs and info of a stored audit, its manifest verified first."""
    from medbench_core.storage import verify_manifest

    folder = Path(folder)
    verify_manifest(folder)
    return pl.read_parquet(folder / "pairs.parquet"), json.loads((folder / "info.json").read_text())


def draw_thumbs(pairs: pl.DataFrame, task: Any, others: Sequence[Any], out: Path) -> list[str]:
    """The first :data:`THUMBS` image pairs between two tasks (a manifest's images are not here) as side-by-side 128-pixel PNGs; their names."""
    from PIL import Image, ImageDraw

    from medbench_core.taskdata.images import load_image

    by_name = {task.name: task, **{o.name: o for o in others}}
    rows = [r for r in pairs.filter(pl.col("kind") == "image").iter_rows(named=True) if r["source"].startswith("task:")][:THUMBS]
    if not rows:
        return []
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for n, r in enumerate(rows):
        other = by_name.get(r["source"][len("task:") :])
        if other is None:
            continue
        left = _image_of(task, r["side"], r["id"])
        right = _image_of(other, r["other_side"], r["other_id"])
        canvas = Image.new("RGB", (2 * 128 + 8, 128 + 14), "white")
        for x, path in ((0, left), (136, right)):
            if path is not None:
                canvas.paste(load_image(path, str(path)).convert("RGB").resize((128, 128)), (x, 0))
        ImageDraw.Draw(canvas).text((2, 129), f"pHash {r['phash_distance']} dHash {r['dhash_distance']}{' exact' if r['exact'] else ''}", fill="black")
        name = f"thumbs/{n:03d}.png"
        canvas.save(out / f"{n:03d}.png", format="PNG")
        names.append(name)
    return names


def _image_of(task: Any, side: str, rid: str) -> Path | None:
    frame, key = (task.queries, "query_id") if side == "query" else (task.corpus, "doc_id")
    ref = frame.filter(pl.col(key) == rid)["image"].to_list() if "image" in frame.columns else []
    return task.resolve_image(ref[0]) if ref and ref[0] else None
