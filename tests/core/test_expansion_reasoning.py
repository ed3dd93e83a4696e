"""Where a reasoning generator's answer starts, family by family, against R2MED's own code.

``r2med_split`` below is ``split_response_for_r1`` of src/base.py in github.com/R2MED/R2MED at
62b7074, copied verbatim (only the unused ``think`` variables and the bare ``except`` kept as they
are): the reference every rule is checked against, on a text written in that family's output
format. R2MED returns an unmatched text unstripped, and so does medbench (compared as they are).
"""

from __future__ import annotations

import re

import pytest
from _expansion_fixtures import scifact_subset, write_r2med

from medbench_core.retrieval.expansion import ExpansionSpec
from medbench_core.retrieval.expansion.frame import R2MED_GENERATOR_RULES, rule_for_generator, split_reasoning
from medbench_core.retrieval.expansion.stage import build_expansion


def r2med_split(model, text):  # noqa: C901 - R2MED's code as published
    if model in ["r1-llama-8b", "r1-qwen-32b", "r1-llama-70b", "qwq-32b", "qwen3-32b", "qwen3-8b"]:
        try:
            think, response = text.split("</think>", 1)
            response = response.strip()
        except Exception as e:  # noqa: F841
            response = text
    elif model in ["huatuo-o1-8b", "huatuo-o1-70b"]:
        thinking_match = re.search(r"Thinking\s*(.*?)\s* Final Response", text, re.DOTALL)
        response_match = re.search(r"Final Response\s*(.*)", text, re.DOTALL)
        think = thinking_match.group(1).strip() if thinking_match else None  # noqa: F841
        response = response_match.group(1).strip() if response_match else None
        if response is None:
            response = text
    elif model in ["sky-32b"]:
        thinking_match = re.search(r"<\|begin_of_thought\|>\s*([\s\S]*?)\s*<\|end_of_thought\|>", text)
        response_match = re.search(r"<\|begin_of_solution\|>\s*([\s\S]*?)\s*<\|end_of_solution\|>", text)
        think = thinking_match.group(1).strip() if thinking_match else None  # noqa: F841
        response = response_match.group(1).strip() if response_match else None
        if response is None:
            response = text
    elif model in ["qwen-7b-ins", "qwen-3b-ins"]:
        response = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
        if len(response) == 0:
            response = text
        else:
            response = response[0].strip()
    else:
        response = text
    return response


# One text per family, in the format its models write (answer, reasoning as medbench keeps them).
R1 = (
    "<think>\nThe question is about scurvy. Vitamin C cannot be synthesised by humans.\n</think>\n\nNeanderthals ate fresh meat and organs, rich in vitamin C.",
    "Neanderthals ate fresh meat and organs, rich in vitamin C.",
    "The question is about scurvy. Vitamin C cannot be synthesised by humans.",
)
QWQ = (
    "Okay, so the user asks about scurvy. Let me recall what I know about vitamin C...\n</think>\n\nLiver and fresh meat supply vitamin C.",
    "Liver and fresh meat supply vitamin C.",
    "Okay, so the user asks about scurvy. Let me recall what I know about vitamin C...",
)  # the chat template opened <think>
HUATUO = (
    "## Thinking\n\nThe patient has fever and a stiff neck. Meningitis should be ruled out.\n\n## Final Response\n\n"
    "Bacterial meningitis; start empirical antibiotics after a lumbar puncture.",
    "Bacterial meningitis; start empirical antibiotics after a lumbar puncture.",
    "The patient has fever and a stiff neck. Meningitis should be ruled out.\n\n##",
)  # R2MED's Thinking regex stops before " Final Response"
SKY = (
    "<|begin_of_thought|>\n\nFirst, recall the pathway of bilirubin.\n\n<|end_of_thought|>\n\n<|begin_of_solution|>\n\n"
    "Unconjugated hyperbilirubinaemia points to haemolysis.\n\n<|end_of_solution|>",
    "Unconjugated hyperbilirubinaemia points to haemolysis.",
    "First, recall the pathway of bilirubin.",
)
SEARCH_R1 = (
    "<think>I need to find what causes the rash.</think>\n<search> rash after amoxicillin in mononucleosis </search>\n"
    "<information>Doc 1: ...</information>\n<think>It is the drug rash.</think>\n<answer> An ampicillin rash in infectious mononucleosis </answer>",
    "An ampicillin rash in infectious mononucleosis",
    "<think>I need to find what causes the rash.</think>\n<search> rash after amoxicillin in mononucleosis </search>\n"
    "<information>Doc 1: ...</information>\n<think>It is the drug rash.</think>",
)
PLAIN = (
    "A passage on the Final Response of the immune system </think> as written by GPT-4.\n",
    "A passage on the Final Response of the immune system </think> as written by GPT-4.\n",
    "",
)  # no family marker counts here; the text as written, its newline too (base.py l.35)

CASES = [
    *[(g, "think", R1) for g in ("r1-llama-8b", "r1-qwen-32b", "r1-llama-70b", "qwen3-32b", "qwen3-8b")],
    ("qwq-32b", "think", QWQ),
    *[(g, "huatuo", HUATUO) for g in ("huatuo-o1-8b", "huatuo-o1-70b")],
    ("sky-32b", "sky", SKY),
    *[(g, "answer", SEARCH_R1) for g in ("qwen-3b-ins", "qwen-7b-ins")],
    *[(g, "none", PLAIN) for g in ("gpt4", "o3-mini", "llama-70b", "qwen-7b", "qwen-32b", "qwen-72b")],
]


@pytest.mark.parametrize("generator,rule,case", CASES, ids=[c[0] for c in CASES])
def test_each_generator_familys_answer_is_what_r2meds_code_uses(generator, rule, case):
    text, answer, reasoning = case
    assert rule_for_generator(generator) == rule
    assert split_reasoning(text, rule) == (answer, reasoning)
    assert split_reasoning(text, rule)[0] == r2med_split(generator, text)


def test_every_family_of_r2meds_code_is_covered_and_a_missing_marker_keeps_the_whole_text():
    assert {g for g, _, _ in CASES} >= set(R2MED_GENERATOR_RULES)
    for generator, rule, _ in CASES:
        text = "  A text with no marker of any family.  "
        assert split_reasoning(text, rule) == (text, "") and r2med_split(generator, text) == text
    # Only the first marker counts, as in R2MED's code.
    assert split_reasoning("a</think>b</think>c", "think") == ("b</think>c", "a")
    assert split_reasoning("x <answer>first</answer> <answer>second</answer>", "answer") == ("first", "x")
    assert split_reasoning("Thinking\nabc\n## Final Response\nX\n## Final Response\nY", "huatuo")[0] == "X\n## Final Response\nY"
    # Sky-T1 needs both solution tags.
    assert split_reasoning("<|begin_of_solution|> unfinished", "sky") == ("<|begin_of_solution|> unfinished", "")


def test_a_published_file_is_read_with_its_generators_rule(tmp_path):
    task = scifact_subset()
    texts = {q: f"## Thinking\n\nWhy {q}?\n\n## Final Response\n\nBecause of {q}." for q in task.queries["query_id"].to_list()}
    write_r2med(tmp_path, "SciFact", "hyde", "huatuo-o1-70b", task, texts)
    spec = ExpansionSpec(
        name="hyde-huatuo", method="hyde", source="file", generator="huatuo-o1-70b", path=str(tmp_path), task_folders={"scifact_small": "SciFact"}
    )
    assert spec.reasoning == "auto" and spec.reasoning_rule() == "huatuo"
    frame, info = build_expansion(spec, task)
    q = task.queries["query_id"][0]
    row = frame.filter(frame["query_id"] == q).row(0, named=True)
    assert row["answer"] == f"Because of {q}." and row["raw"] == texts[q] and info["identity"]["reasoning"] == "huatuo"
    # An explicit rule wins; a generated expansion defaults to </think>.
    assert ExpansionSpec(name="x", method="hyde", source="file", generator="huatuo-o1-70b", path="p", reasoning="none").reasoning_rule() == "none"
    assert ExpansionSpec(name="y", method="hyde", source="generate", generator="./models/qwen3").reasoning_rule() == "think"
