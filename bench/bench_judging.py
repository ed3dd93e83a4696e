"""The judging stage's overhead beside the judge model's own work, same pairs, paired and interleaved.

    HF_HUB_OFFLINE=1 nice -n 10 python bench/bench_judging.py [--pairs 64] [--repeats 5] [--hidden 128 --layers 4]

Pairs: the first SciFact train claims (``tests/core/_expansion_fixtures.scifact_subset``) against
their relevant abstracts and others, UMBRELA's prompt, passages cut to 512 words. Judge: a
seeded random-weight Llama (``tiny_lm``: no real weights are reachable here; the cost of the
stage around the model does not depend on what the weights say), float32, batch 8, on CPU (or
``--device cuda``). Both sides get the same chat-rendered prompts and alternate, ``--repeats``
times, after one warm-up each:

- **constrained** (the default decoding): the stage (``LLMJudge.judge``: render the template and
  chat turns, tokenise, sort longest first, pad, one forward pass per batch with position ids from
  the mask, pick the grade token, softmax over the grades, build the verdicts) against the bare
  forward passes on the same pre-tokenised, pre-padded batches (``model(input_ids, attention_mask, logits_to_keep=1)``);
- **generate** (free text, parsed): the stage (``decode: generate``: the same, then
  ``Generator.generate`` and :func:`parse_grade`) against bare ``model.generate`` on the same
  pre-padded batches with the same greedy settings and ``max_new_tokens``.

Reports the median and range of each side's seconds and of the paired ratio stage / bare, the
load average before and after, and the date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "core"))


def pairs(n: int):
    from _expansion_fixtures import scifact_subset

    from medbench_core.evaluation.judging.prompt import cut_words

    task = scifact_subset(30, 200)
    queries = dict(zip(task.queries["query_id"], task.queries["text"]))
    docs = dict(zip(task.corpus["doc_id"], task.doc_text()))
    ids = list(docs)
    out = [(queries[q], cut_words(docs[ids[(i * 7) % len(ids)]], 512)) for i, q in enumerate(list(queries) * (n // len(queries) + 1))][:n]
    return [q for q, _ in out], [p for _, p in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    import torch
    from _expansion_fixtures import tiny_lm

    from medbench_core.evaluation.judging.judge import LLMJudge
    from medbench_core.evaluation.judging.prompt import prompt_text
    from medbench_core.evaluation.judging.spec import JudgementSpec
    from medbench_core.retrieval.expansion.generate import Generator

    load_before = os.getloadavg()
    folder = tiny_lm(Path(tempfile.mkdtemp()) / "judge", hidden=args.hidden, layers=args.layers)
    spec = JudgementSpec(name="bench", source="generate", judge=str(folder), pool={"models": ["x"]}, base_dir=str(ROOT))
    template = prompt_text(spec)
    gen = Generator(str(folder), device=args.device)
    queries, passages = pairs(args.pairs)
    judges = {
        "constrained": LLMJudge(gen, template, decode="constrained", batch_size=8),
        "generate": LLMJudge(gen, template, decode="generate", batch_size=8, max_new_tokens=args.max_new_tokens),
    }
    decoding = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": args.max_new_tokens, "seed": 0, "repetition_penalty": 1.0}
    kw = gen.generate_kwargs(decoding)
    results = {}
    for mode, judge in judges.items():
        prompts = judge.prompts(queries, passages)
        batches = [b for _, b, _ in judge._batches(prompts)]  # the very batches the stage makes: tokenised and padded before the clock

        def bare() -> float:
            t0 = time.perf_counter()
            with torch.inference_mode():
                for b in batches:
                    if mode == "constrained":
                        gen.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], logits_to_keep=1).logits[:, -1, :]
                    else:
                        gen.model.generate(input_ids=b["input_ids"], attention_mask=b["attention_mask"], **kw)
            return time.perf_counter() - t0

        def stage() -> float:
            t0 = time.perf_counter()
            judge.judge(queries, passages)
            return time.perf_counter() - t0

        bare(), stage()  # warm-up
        b_s, s_s = [], []
        for i in range(args.repeats):
            first, second = (bare, stage) if i % 2 == 0 else (stage, bare)  # interleaved, alternating which goes first
            x, y = first(), second()
            b, s = (x, y) if first is bare else (y, x)
            b_s.append(b)
            s_s.append(s)
        ratios = [s / b for s, b in zip(s_s, b_s)]
        results[mode] = (b_s, s_s, ratios)
    load_after = os.getloadavg()
    print(f"date {dt.date.today().isoformat()}; {args.pairs} pairs, tiny Llama hidden {args.hidden} x {args.layers} layers, batch 8, {args.device}; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")  # fmt: skip
    for mode, (b_s, s_s, ratios) in results.items():
        med = statistics.median
        print(f"{mode:<12} bare {med(b_s):.3f}s [{min(b_s):.3f}, {max(b_s):.3f}]  stage {med(s_s):.3f}s [{min(s_s):.3f}, {max(s_s):.3f}]  "
              f"stage/bare {med(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]  (n={len(ratios)})")  # fmt: skip


if __name__ == "__main__":
    main()
