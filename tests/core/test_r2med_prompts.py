"""The prompts and decoding a regenerated expansion uses are R2MED's, per method and task.

R2MED's ``generate_hypothetical_doc.py`` (github.com/R2MED/R2MED at 62b7074) formats
``generate_hy_doc[method][task]`` of its ``instrcution.py`` (l.111-115: ``hyde`` l.81-90,
``query2doc`` l.91-100 with the few-shot examples of ``example.py``, ``lamer`` l.101-110) with
``TEXT`` (and ``PASSAGE`` for LameR: l.84-86, 185-188), under the system turn "You are a helpful
assistant." (l.192), sampling open models with ``SamplingParams(temperature=0.7, seed=42,
max_tokens=10240)`` (l.247). R2MED's two source files are kept verbatim in
tests/core/r2med_source/ (MIT licence; their sha256 checked here) and executed as R2MED imports them.
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

import pytest

from medbench_core.retrieval.expansion.generate import render
from medbench_core.retrieval.expansion.spec import DEFAULT_SYSTEM, ExpansionSpec, prompt_text

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().parent / "r2med_source"
SHA256 = {
    "example.py.txt": "a1636976765b6ce4ce365349e04183bf1d1f40337d2f5f4342f00de03f2363af",
    "instrcution.py.txt": "8e767d77f22330beb4417b6baebc29be5e7ca59f386e5106162bea56882902a7",
}
# medbench's R2MED task names -> R2MED's keys in instrcution.py
TASKS = {
    "r2med_biology": "Stack-Biology", "r2med_bioinformatics": "Stack-Bioinformatics", "r2med_medical_sciences": "Stack-Medical",
    "r2med_medxpertqa_exam": "MedXpertQA-Exam", "r2med_medqa_diag": "MedQA-Diag", "r2med_pmc_treatment": "PMC-Treat",
    "r2med_pmc_clinical": "PMCPatients", "r2med_iiyi_clinical": "IIYiPatients-EN",
}  # fmt: skip


@pytest.fixture(scope="module")
def r2med():
    """R2MED's instrcution.py executed as generate_hypothetical_doc.py imports it (``from instrcution import *``)."""
    for name, digest in SHA256.items():
        assert hashlib.sha256((SOURCE / name).read_bytes()).hexdigest() == digest, name
    example = types.ModuleType("example")
    exec(compile((SOURCE / "example.py.txt").read_text(encoding="utf-8"), "example.py", "exec"), example.__dict__)
    saved = sys.modules.get("example")
    sys.modules["example"] = example
    try:
        namespace: dict = {}
        exec(compile((SOURCE / "instrcution.py.txt").read_text(encoding="utf-8"), "instrcution.py", "exec"), namespace)
    finally:
        if saved is None:
            sys.modules.pop("example", None)
        else:
            sys.modules["example"] = saved
    return namespace


@pytest.mark.parametrize("method", ["hyde", "query2doc", "lamer"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_tasks_prompt_renders_as_r2meds(r2med, method, task):
    from r2med_like_texts import CLINICAL_CASE, R2MED_DEMO_QUERY

    spec = ExpansionSpec(name="e", method=method, source="generate", generator="x", **({"upstream": "r2med-bm25"} if method == "lamer" else {}))
    template = prompt_text(spec, task, ROOT / "prompts")
    assert template == (ROOT / "prompts" / method / f"{task}.txt").read_text(encoding="utf-8")  # the task's own file, not the generic one
    base_prompt = r2med["generate_hy_doc"][method][TASKS[task]]
    passages = "\n[1]. first passage\n[2]. second {TEXT} passage"  # a brace in a passage: substituted once, as str.format does
    for text in (R2MED_DEMO_QUERY, CLINICAL_CASE):
        if method == "lamer":
            assert render(template, text, passages) == base_prompt.format(TEXT=text, PASSAGE=passages)  # l.185-186
        else:
            assert render(template, text) == base_prompt.format(TEXT=text)  # l.187-188


def test_query2doc_prompts_carry_r2meds_two_examples(r2med):
    for task, key in TASKS.items():
        template = (ROOT / "prompts" / "query2doc" / f"{task}.txt").read_text(encoding="utf-8")
        assert r2med["Example"][key] in template and "###Examples:###" in template and "###Real Test:###" in template


def test_decoding_and_system_turn_default_to_r2meds_open_model_settings():
    spec = ExpansionSpec(name="e", method="hyde", source="generate", generator="x")
    assert spec.resolved_decoding() == {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_new_tokens": 10240, "seed": 42, "repetition_penalty": 1.0}
    assert spec.system == DEFAULT_SYSTEM == "You are a helpful assistant."
