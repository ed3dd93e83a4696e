"""Generation tokens/s through medbench's expansion stage vs the same model's ``generate`` called directly.

    python bench/bench_generate.py [--queries 32] [--new-tokens 64] [--batch-size 8] [--repeats 3] [--threads 1]

A random-weight Llama (hidden 256, 4 layers, all-MiniLM-L6-v2's BERT tokenizer and a chat
template; no pretrained causal LM is reachable here) is saved as a local folder and loaded once.
Prompts: the first judged SciFact train claims inside ``prompts/hyde.txt``.

- medbench: ``generate_expansions`` (chat template, tokenisation, batches longest first with left
  padding, seeded sampling, decoding, token counting, the polars frame), timed whole;
- direct: the same rendered prompts, in the same batches with the same per-batch seeds, through
  ``tokenizer(...)`` + ``model.generate`` + ``batch_decode``.

Both sides must produce the very same texts (checked), so the ratio measures medbench's overhead
only. Sides alternate; the best of ``--repeats`` is kept for each. Also timed: a warm run of the
stage (the key of a stored expansion computed, its manifest verified and the frame read back).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "core"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both sides (the machine is shared)")
    args = ap.parse_args()

    import torch
    from _expansion_fixtures import scifact_subset, tiny_lm

    from medbench_core.retrieval.expansion import ExpansionSpec, load_expansion, store_expansion
    from medbench_core.retrieval.expansion.generate import Generator, generate_expansions, user_messages
    from medbench_core.retrieval.expansion.spec import prompt_text
    from medbench_core.retrieval.expansion.stage import expansion_stage_key

    torch.set_num_threads(args.threads)
    task = scifact_subset(n_queries=args.queries, n_other_docs=0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny_lm(Path(tmp) / "lm", seed=0, hidden=256, layers=4)
        spec = ExpansionSpec(
            name="hyde-bench", method="hyde", source="generate", generator=str(folder), batch_size=args.batch_size,
            decoding={"temperature": 1.0, "top_p": 1.0, "max_new_tokens": args.new_tokens, "seed": 42},
        )
        template = prompt_text(spec, task.name, ROOT / "prompts")
        gen = Generator(str(folder))

        # The direct side gets the prompts as medbench renders them, batched as medbench batches them.
        _, users = user_messages(spec, task, template)
        prompts = gen.chat_prompts(users, spec.system)
        tok, model = gen.tokenizer, gen.model
        lengths = [len(x) for x in tok(prompts, add_special_tokens=False)["input_ids"]]
        order = sorted(range(len(prompts)), key=lambda i: -lengths[i])
        decoding = spec.resolved_decoding()
        kw = gen.generate_kwargs(decoding)

        def direct() -> tuple[float, float, int, list[str]]:
            t0, c0 = time.perf_counter(), time.process_time()
            texts: list[str] = [""] * len(prompts)
            n_new = 0
            with torch.inference_mode():
                for b, start in enumerate(range(0, len(order), args.batch_size)):
                    idx = order[start : start + args.batch_size]
                    batch = tok([prompts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False)
                    torch.manual_seed(decoding["seed"] + b)
                    out = model.generate(**batch, **kw)[:, batch["input_ids"].shape[1] :]
                    for row, i in enumerate(idx):
                        n = gen.generated_length(out[row].tolist())
                        n_new += n
                        texts[i] = tok.decode(out[row][:n], skip_special_tokens=True)
            return time.perf_counter() - t0, time.process_time() - c0, n_new, texts

        def medbench() -> tuple[float, float, int, list[str]]:
            t0, c0 = time.perf_counter(), time.process_time()
            frame, _, info = generate_expansions(spec, task, template, generator=gen, revision="bench")
            return time.perf_counter() - t0, time.process_time() - c0, info["generated_tokens"], frame["raw"].to_list()

        direct()  # warm-up: first calls allocate
        rows = []
        for r in range(args.repeats):
            sides = (("direct", direct), ("medbench", medbench))
            for name, fn in sides if r % 2 == 0 else sides[::-1]:  # alternate which goes first
                sec, cpu, n, texts = fn()
                rows.append((name, r + 1, sec, n, n / sec, n / cpu, texts))
                print(f"{name:9s} run {r + 1}: {n} tokens in {sec:.2f} s wall ({cpu:.2f} s CPU) = {n / sec:.1f} tokens/s ({n / cpu:.1f} per CPU s)", flush=True)
        ref = rows[0][-1]
        assert all(x[-1] == ref for x in rows), "medbench and direct generate produced different texts"
        best = {name: max(x[4] for x in rows if x[0] == name) for name in ("direct", "medbench")}
        best_cpu = {name: max(x[5] for x in rows if x[0] == name) for name in ("direct", "medbench")}
        by_run = {(x[0], x[1]): x for x in rows}
        pairs = [by_run[("medbench", r)][4] / by_run[("direct", r)][4] for r in range(1, args.repeats + 1)]
        cpu_pairs = [by_run[("medbench", r)][5] / by_run[("direct", r)][5] for r in range(1, args.repeats + 1)]

        # Warm run of the stage: the stored artifact's key, manifest and frame.
        frame, _, info = generate_expansions(spec, task, template, generator=gen)
        out = Path(tmp) / "store" / "key"
        store_expansion(out, frame, info)
        t0 = time.perf_counter()
        expansion_stage_key(spec, task, prompts_dir=ROOT / "prompts")
        load_expansion(out)
        warm = time.perf_counter() - t0

    print()
    print(f"queries {task.queries.height}, batch {args.batch_size}, {args.new_tokens} new tokens each, torch threads {args.threads}")
    print(f"best tokens/s: direct {best['direct']:.1f}, medbench {best['medbench']:.1f}")
    print(f"ratio medbench / direct, wall (best of {args.repeats}): {best['medbench'] / best['direct']:.3f}x   per pair: {', '.join(f'{p:.3f}x' for p in pairs)}")
    print(f"ratio medbench / direct, tokens per CPU second (best of {args.repeats}): {best_cpu['medbench'] / best_cpu['direct']:.3f}x   "
          f"median of pairs {statistics.median(cpu_pairs):.3f}x   per pair: {', '.join(f'{p:.3f}x' for p in cpu_pairs)}")
    print(f"warm stage (key: generator folder hash + prompt; manifest verified; frame read): {warm * 1000:.0f} ms")


if __name__ == "__main__":
    main()
