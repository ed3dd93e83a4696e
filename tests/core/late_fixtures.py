"""Texts the late-interaction tests score, shared with ``bench/record_pylate_reference.py`` (which records what
pylate itself computes on them into ``pylate_reference/``). Plain data: importable without medbench's
environment."""

from __future__ import annotations

TOY_DOCS = [
    ("d01", "Aspirin lowers the risk of myocardial infarction in adults with coronary disease."),
    ("d02", "Statins reduce LDL cholesterol; rhabdomyolysis is a rare adverse effect."),
    ("d03", "An enlarged cardiac silhouette on a chest film suggests cardiomegaly or a pericardial effusion."),
    ("d04", "Metformin is the first-line drug for type 2 diabetes (HbA1c above 7%)."),
    ("d05", "Atrial fibrillation: an irregularly irregular rhythm without P waves, anticoagulation by CHA2DS2-VASc."),
    ("d06", "Gout is caused by monosodium urate crystals deposited in the joints."),
    ("d07", "Triptans relieve migraine attacks within two hours in most patients!"),
    ("d08", "Warfarin's effect is monitored with the INR; vitamin K reverses it."),
    ("d09", "Pulmonary embolism presents with dyspnoea, pleuritic chest pain and tachycardia."),
    ("d10", "Acute appendicitis: periumbilical pain migrating to the right iliac fossa."),
    ("d11", "Psoriasis forms silvery plaques on extensor surfaces -- elbows, knees."),
    ("d12", "Loop diuretics such as furosemide act on the thick ascending limb of the loop of Henle."),
    ("d13", "Beta blockers lower heart rate and are used after a heart attack."),
    ("d14", "Osteoporosis: low bone mineral density raises the risk of hip fracture in older women."),
]
TOY_QUERIES = [
    ("q1", "does aspirin prevent heart attacks?"),
    ("q2", "enlarged heart on chest x-ray"),
    ("q3", "what causes gout"),
    ("q4", "irregular heart rhythm and blood thinners"),
    ("q5", "drug treatment of type 2 diabetes"),
]


def m3r_cardiology_texts() -> dict[str, list[tuple[str, str]]]:
    """The M3Retrieve Cardiology fixture's texts as a text retriever reads them: captions, and title + text joined."""
    try:
        from tests.core.reader_fixtures import DISCIPLINES
    except ImportError:  # run from bench/record_pylate_reference.py with tests/core on sys.path
        from reader_fixtures import DISCIPLINES

    d = DISCIPLINES["Cardiology"]
    return {"queries": [(q, c) for q, c, _ in d["queries"]], "docs": [(i, f"{t} {x}" if t else x) for i, t, x in d["corpus"]]}


def reference_sets() -> dict[str, dict[str, list[tuple[str, str]]]]:
    """Every text set with a recorded pylate reference, by name."""
    return {"toy": {"queries": TOY_QUERIES, "docs": TOY_DOCS}, "m3r_cardiology": m3r_cardiology_texts()}
