"""Reader throughput on the largest local dataset, SciFact train (5,183 abstracts, 809 claims, 919 judgments).

    python bench/bench_readers.py [--pairs N]

In one run, on the same content:

- ``beir``: the bundled BEIR folder (corpus.jsonl, queries.jsonl, qrels/train.tsv) through
  ``read_beir``, as tasks.yaml curates it;
- ``mteb (parquet)``: a generated copy in the Hugging Face Parquet layout MTEB publishes
  (corpus/, queries/, default/ configs) through ``read_mteb``;
- ``mteb (jsonl + card)``: a generated copy in R2MED's hub layout (a dataset card naming
  corpus.jsonl, query.jsonl, qrels.jsonl; ``id``, ``q_id``/``p_id``) through ``read_mteb``;
- ``r2med_repo``: the same files in R2MED's repository layout through ``read_r2med_repo``.

Records/s counts every record read: documents + queries in the files + judgments. Each reader
builds the whole task (polars frames, referential checks). The readers run in interleaved rounds
(bench/paired.py: forward, then reversed), each timed for wall and CPU; the figures are each
reader's time against ``beir``'s in the same round, median and range over the rounds. The MTEB
readers also hash the files they read (the task's dataset revision).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

SHARED = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared")
SCIFACT = SHARED / "data" / "scifact"


def load_rows() -> tuple[list[dict], list[dict], list[tuple[str, str, int]]]:
    docs = [json.loads(x) for x in (SCIFACT / "corpus.jsonl").read_text().splitlines() if x.strip()]
    queries = [json.loads(x) for x in (SCIFACT / "queries.jsonl").read_text().splitlines() if x.strip()]
    qrels = []
    for row in (SCIFACT / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        q, d, s = row.split("\t")
        qrels.append((q, d, int(s)))
    return docs, queries, qrels


def write_copies(tmp: Path) -> dict[str, Path]:
    import polars as pl

    docs, queries, qrels = load_rows()
    pq = tmp / "mteb_parquet"
    for sub in ("corpus", "queries", "default"):
        (pq / sub).mkdir(parents=True)
    pl.DataFrame({"_id": [str(d["_id"]) for d in docs], "title": [d.get("title", "") for d in docs], "text": [d.get("text", "") for d in docs]}).write_parquet(
        pq / "corpus" / "corpus-00000-of-00001.parquet"
    )
    pl.DataFrame({"_id": [str(q["_id"]) for q in queries], "text": [q["text"] for q in queries]}).write_parquet(
        pq / "queries" / "queries-00000-of-00001.parquet"
    )
    pl.DataFrame({"query-id": [q for q, _, _ in qrels], "corpus-id": [d for _, d, _ in qrels], "score": [s for _, _, s in qrels]}).write_parquet(
        pq / "default" / "train-00000-of-00001.parquet"
    )

    def jsonl(path: Path, rows) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    card = tmp / "mteb_card"
    r2 = tmp / "r2med_repo"
    for folder in (card, r2):
        jsonl(folder / "corpus.jsonl", ({"id": str(d["_id"]), "text": f"{d.get('title', '')} {d.get('text', '')}".strip()} for d in docs))
        jsonl(folder / "query.jsonl", ({"id": str(q["_id"]), "text": q["text"]} for q in queries))
        jsonl(folder / "qrels.jsonl", ({"q_id": q, "p_id": d, "score": s} for q, d, s in qrels))
    (card / "README.md").write_text(
        "---\nconfigs:\n"
        + "".join(
            f"- config_name: {c}\n  data_files:\n  - split: {c}\n    path: {f}\n"
            for c, f in (("corpus", "corpus.jsonl"), ("query", "query.jsonl"), ("qrels", "qrels.jsonl"))
        )
        + "---\n"
    )
    return {"mteb (parquet)": pq, "mteb (jsonl + card)": card, "r2med_repo": r2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    paired.add_arguments(parser, default=7)
    args = parser.parse_args()

    from medbench_core.taskdata.readers.beir import BeirOptions, read_beir
    from medbench_core.taskdata.readers.mteb import MtebOptions, read_mteb
    from medbench_core.taskdata.readers.r2med import R2medRepoOptions, read_r2med_repo

    print(paired.header("readers on SciFact train"), flush=True)
    docs, queries, qrels = load_rows()
    n_records = len(docs) + len(queries) + len(qrels)
    with tempfile.TemporaryDirectory() as tmp:
        copies = write_copies(Path(tmp))
        readers = {
            "beir": lambda: read_beir(SCIFACT, BeirOptions(name="scifact", split="train", query_licence="CC-BY-4.0", doc_licence="ODC-By-1.0")),
            "mteb (parquet)": lambda: read_mteb(
                copies["mteb (parquet)"], MtebOptions(name="scifact", split="train", query_licence="CC-BY-4.0", doc_licence="ODC-By-1.0")
            ),
            "mteb (jsonl + card)": lambda: read_mteb(
                copies["mteb (jsonl + card)"], MtebOptions(name="scifact", query_licence="CC-BY-4.0", doc_licence="ODC-By-1.0")
            ),
            "r2med_repo": lambda: read_r2med_repo(copies["r2med_repo"], R2medRepoOptions(name="scifact", query_licence="CC-BY-4.0", doc_licence="ODC-By-1.0")),
        }
        m = paired.measure({name: (lambda read=read: paired.call(read)) for name, read in readers.items()}, args.pairs, warmup=1)
    shapes = {name: {(t.value.queries.height, t.value.corpus.height, t.value.qrels.height) for t in runs} for name, runs in m.samples.items()}
    print(f"SciFact train: {len(docs)} documents + {len(queries)} queries + {len(qrels)} judgments = {n_records} records")
    print("\n| reader | records/s (median wall) | task (queries, docs, qrels) |\n|---|---:|---|")
    for name in readers:
        print(f"| {name} | {n_records / m.seconds(name, 'wall')[0]:,.0f} | {sorted(shapes[name])} |")
    print()
    print(m.table([(f"{name} / beir", name, "beir") for name in readers if name != "beir"]))
    if len(set().union(*shapes.values())) != 1:
        raise SystemExit(f"readers disagree on the task's shape: {shapes}")


if __name__ == "__main__":
    main()
