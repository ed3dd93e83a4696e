"""FrenchMedMCQA: each French question ranks its own five options (a candidate-set task); difficulty tiers from the number of correct options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import DataError
from medbench_core.taskdata.licences import normalise_licence
from medbench_core.taskdata.readers.base import ReadContext, Reader, ReaderOptions
from medbench_core.taskdata.readers.common import (
    build_task_from_rows,
    id_value,
    load_json,
    refuse_unmapped,
    text_concept_id,
)
from medbench_core.taskdata.task import Task, TaskMeta

MCQA_LETTERS = ("a", "b", "c", "d", "e")
# The fields of a FrenchMedMCQA question record (the dataset's own JSON).
FIELDS = frozenset({"id", "question", "answers", "correct_answers", "nbr_correct_answers", "subject_name"})


@dataclass(frozen=True, kw_only=True)
class FrenchMedMCQAOptions(ReaderOptions):
    """Options of the ``frenchmedmcqa`` reader: the ``split`` file read and the dataset's ``licence``."""

    name: str = "frenchmedmcqa"
    split: str = "test"
    licence: str = "Apache-2.0"


def mcqa_tier(n_correct: int) -> str:
    """Difficulty tier of a FrenchMedMCQA question from its number of correct options.

    ``hard``: 1 correct option of 5; ``medium``: 2 or 3; ``easy``: 4 or 5. The rule follows
    what a ranking must do: with one correct option the model has to single it out from four
    distractors, and a random ranking of the five options scores nDCG@10 = 0.59 in
    expectation; with 2 or 3 correct options 0.72 or 0.83; with 4 it scores 0.92 and with 5
    it scores 1 (nothing to discriminate).
    """
    if n_correct <= 0:
        raise ValueError(f"n_correct must be >= 1, got {n_correct}")
    if n_correct == 1:
        return "hard"
    if n_correct <= 3:
        return "medium"
    return "easy"


def read_frenchmedmcqa(folder: str | Path, options: FrenchMedMCQAOptions | None = None, context: ReadContext | None = None) -> Task:
    """FrenchMedMCQA ``<folder>/<split>.json`` as a concept-discrimination task.

    One query per question (id: the question's ``id``; text: the question; ``tier`` from
    :func:`mcqa_tier`; concept ids: those of its correct options). One document per option,
    id ``<question id>:<letter>``, text the option, concept id :func:`text_concept_id` of the
    option text. ``candidates`` pairs each question with its own five options only; qrels
    judge all five (correct 1, others 0). Language ``fr``, discipline the record's
    ``subject_name``, licence ``licence`` normalised.
    """
    o = options or FrenchMedMCQAOptions()
    name, split = o.name, o.split
    folder = Path(folder)
    path = folder if folder.suffix == ".json" else folder / f"{split}.json"
    data = load_json(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of questions, got {type(data).__name__}")
    lic = normalise_licence(o.licence)
    queries, corpus, qrels, cands = [], [], [], []
    seen: dict[str, int] = {}
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise DataError(f"{path}: question {i}: expected a JSON object, got {type(rec).__name__}")
        raw = rec.get("id")
        qid = id_value(raw, f"{path}: question {i}", "id") if raw not in (None, "") else ""
        where = f"{path}: question {i}" + (f" (id {qid})" if qid else "")
        if not qid:
            raise DataError(f"{where}: no 'id'")
        if qid in seen:
            raise DataError(f"{where}: id appears twice (first as question {seen[qid]})")
        seen[qid] = i
        question = rec.get("question")
        if question is not None and not isinstance(question, str):
            raise DataError(f"{where}: 'question' is {type(question).__name__}, not a string")
        question = (question or "").strip()
        if not question:
            refuse_unmapped(rec, FIELDS, where, "no question text")
            raise DataError(f"{where}: record has no question text (and no image); fix or drop the record")
        answers = rec.get("answers")
        if not isinstance(answers, dict) or sorted(answers) != list(MCQA_LETTERS):
            got = sorted(answers) if isinstance(answers, dict) else type(answers).__name__
            raise DataError(f"{where}: 'answers' must map the letters {list(MCQA_LETTERS)} to option texts, got {got}")
        correct = rec.get("correct_answers")
        if not isinstance(correct, list) or not correct or not set(correct) <= set(MCQA_LETTERS) or len(set(correct)) != len(correct):
            raise DataError(f"{where}: 'correct_answers' must be a non-empty list of distinct letters a-e, got {correct!r}")
        n_stated = rec.get("nbr_correct_answers")
        if n_stated is not None and int(n_stated) != len(correct):
            raise DataError(f"{where}: nbr_correct_answers is {n_stated} but correct_answers lists {len(correct)}")
        discipline = (rec.get("subject_name") or "").strip() or "unknown"
        concepts: dict[str, str] = {}
        for letter in MCQA_LETTERS:
            text = answers[letter]
            if not isinstance(text, str) or not text.strip():
                raise DataError(f"{where}: option {letter!r} has no text; an option needs text to be ranked")
            did = f"{qid}:{letter}"
            concepts[letter] = text_concept_id(text)
            corpus.append(
                {
                    "doc_id": did,
                    "text": text.strip(),
                    "language": "fr",
                    "modality": "text",
                    "discipline": discipline,
                    "concept_ids": [concepts[letter]],
                    "licence": lic,
                }
            )
            qrels.append({"query_id": qid, "doc_id": did, "relevance": int(letter in correct)})
            cands.append({"query_id": qid, "doc_id": did})
        queries.append(
            {
                "query_id": qid,
                "text": question,
                "language": "fr",
                "modality": "text",
                "discipline": discipline,
                "concept_ids": sorted({concepts[c] for c in correct}),
                "tier": mcqa_tier(len(correct)),
                "licence": lic,
            }
        )
    if not queries:
        raise DataError(f"{path}: no questions")
    meta = TaskMeta(
        name=name,
        source=o.source or f"FrenchMedMCQA (Labrak et al., 2022), {split} split",
        description=o.description
        or "French pharmacy exam question -> its own five options; correct options relevant (MMed-Bench-IR concept discrimination shape)",
        licences=(lic,),
        languages=("fr",),
        research_only=o.research_only,
    )
    return build_task_from_rows(meta, queries, corpus, qrels, cands, None, str(path))


READER = Reader("frenchmedmcqa", FrenchMedMCQAOptions, read_frenchmedmcqa)
