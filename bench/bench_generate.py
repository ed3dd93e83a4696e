"""Generation tokens/s through medbench's expansion stage vs the same model's ``generate`` called directly.

    python bench/bench_generate.py [--queries 32] [--new-tokens 64] [--batch-size 8] [--pairs 5] [--threads 1]

A random-weight Llama (hidden 256, 4 layers, all-MiniLM-L6-v2's BERT tokenizer and a chat
template; no pretrained causal LM is reachable here) is saved as a local folder and loaded once.
Prompts: the first judged SciFact train claims inside ``prompts/hyde.txt``.

- medbench: ``generate_expansions`` (chat template, tokenisation, batches longest first with left
  padding, seeded sampling, decoding, token counting, the polars frame), timed whole;
- direct: the same rendered prompts, in the same batches with the same per-batch seeds, through
  ``tokenizer(...)`` + ``model.generate`` + ``batch_decode``.

Both sides must produce the very same texts (checked), so the ratio measures medbench's overhead
only. The sides run in interleaved rounds (bench/paired.py: A B, B A, ...); the figures are the
per-round ratios medbench / direct of wall and CPU time (this process, every thread), median and
range. Also timed: a warm run of the stage (the key of a stored expansion computed, its manifest
verified and the frame read back).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "core"))
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    paired.add_arguments(ap)
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
            name="hyde-bench",
            method="hyde",
            source="generate",
            generator=str(folder),
            batch_size=args.batch_size,
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

        def direct() -> tuple[int, list[str]]:
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
            return n_new, texts

        def medbench() -> tuple[int, list[str]]:
            frame, _, info = generate_expansions(spec, task, template, generator=gen, revision="bench")
            return info["generated_tokens"], frame["raw"].to_list()

        direct()  # warm-up: first calls allocate

        def say(r: int, side: str, x: paired.Sample) -> None:
            n = x.value[0]
            print(
                f"{side:9s} round {r + 1}: {n} tokens in {x.wall:.2f} s wall ({x.cpu:.2f} s CPU) = {n / x.wall:.1f} tokens/s ({n / x.cpu:.1f} per CPU s)",
                flush=True,
            )

        m = paired.measure({"direct": lambda: paired.call(direct), "medbench": lambda: paired.call(medbench)}, args.pairs, report=say)
        ref = m.samples["direct"][0].value
        assert all(x.value == ref for side in m.samples.values() for x in side), "medbench and direct generate produced different texts"

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
    print(m.table([("medbench / direct generate", "medbench", "direct")]))
    print(f"warm stage (key: generator folder hash + prompt; manifest verified; frame read): {warm * 1000:.0f} ms")


if __name__ == "__main__":
    main()
