"""The split of the GNU Health ICD-10 concepts into tasks: families by chapter (crosslingual, monolingual,
discrimination), each query a subcode's name asking for its three-character category, the confusion sets,
and the two guards that hold out a query near its document or near a query of an earlier task. The rules,
worked out: :mod:`medbench_core.taskdata.readers.gnuhealth_icd`'s docstring."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from medbench_core.taskdata.readers.gnuhealth_concepts import Concept, Icd, base_locale, document_row, report_row

FAMILIES = ("crosslingual", "monolingual", "discrimination")
TIERS = ("block", "chapter", "distant")
CONFUSERS = 4  # a confusion set is the concept and four confusers: five options, as FrenchMedMCQA's
GUARD = 0.8


class SplitOptions(Protocol):
    """What the split depends on (the reader's options: :class:`~medbench_core.taskdata.readers.gnuhealth_icd.GnuHealthIcdOptions`)."""

    languages: tuple[str, ...]
    min_names: int
    max_units: int
    seed: int
    english: bool


def _order(seed: int, *parts: str) -> str:
    return hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).hexdigest()


@dataclass
class Split:
    """Every task of the split: its queries (id, language, code, text, tier), documents (code, language) and candidates."""

    tasks: dict[str, dict[str, Any]]
    report: list[dict[str, Any]]


def family_of(icd: Icd, c: Concept) -> str:
    return FAMILIES[(icd.chapter_number[c.chapter] - 1) % len(FAMILIES)]


def build_split(icd: Icd, options: SplitOptions) -> Split:
    """All tasks of the split the options describe (each read builds it whole; see the module docstring)."""
    report: list[dict[str, Any]] = []
    langs = [base_locale(lang) for lang in options.languages]
    usable = {lang: sum(1 for c in icd.concepts.values() if lang in c.names) for lang in langs}
    for lang in langs:
        if usable[lang] < options.min_names:
            report.append(
                report_row(
                    "",
                    0,
                    "",
                    lang,
                    "language_too_small",
                    f"{usable[lang]} usable names, min_names is {options.min_names}",
                )
            )
    langs = [lang for lang in langs if usable[lang] >= options.min_names and lang != "en"]
    units: dict[str, list[Concept]] = {}
    for c in icd.concepts.values():
        units.setdefault(c.unit, []).append(c)
    for cs in units.values():
        cs.sort(key=lambda c: c.code)
    query_langs = (["en"] if options.english else []) + langs
    # A subcode asks for its three-character category: one without an active record of its own has no document.
    heads: dict[str, Concept] = {}
    for u, cs in sorted(units.items()):
        head = icd.concepts.get(u)
        if head is not None:
            heads[u] = head
            continue
        for s in cs:
            report.append(report_row("", s.line, s.code, "", "no_category_record", f"{u} has no active record: no document to ask for"))
    by_family: dict[str, list[str]] = {f: [] for f in FAMILIES}
    for u, head in heads.items():
        by_family[family_of(icd, head)].append(u)
    for f, family in by_family.items():
        family.sort(key=lambda u, f=f: _order(options.seed, f, u))
    cap = options.max_units or None
    tasks: dict[str, dict[str, Any]] = {}

    def subcodes(u: str) -> list[Concept]:
        return [s for s in units[u] if s.code != u]

    def asking(family: list[str], languages: list[str]) -> list[str]:
        """The family's three-character codes with a subcode named in one of ``languages``, in the seeded order."""
        return [u for u in family if any(lang in s.names for s in subcodes(u) for lang in languages)]

    # crosslingual: a subcode's name in L (or English) -> the English records of every category of the family
    fam = by_family["crosslingual"]
    asked = sorted(asking(fam, query_langs)[:cap])
    queries = [(lang, s.code, s.names[lang], None) for u in asked for s in subcodes(u) for lang in query_langs if lang in s.names]
    tasks["crosslingual"] = {
        "queries": queries,
        "docs": [(u, "en") for u in sorted(fam)],
        "qrels": [(f"{lang}:{code}", code[:3], 1) for lang, code, _, _ in queries],
        "candidates": None,
    }

    # discrimination: a subcode's name -> its own five English category records, its category and four confusers
    fam = by_family["discrimination"]
    in_block: dict[str, list[str]] = {}
    in_chapter: dict[str, list[str]] = {}
    for u in fam:
        in_block.setdefault(heads[u].block, []).append(u)
        in_chapter.setdefault(heads[u].chapter, []).append(u)
    dq, dd, dc, dr = [], set(), [], []
    for u in sorted(asking(fam, query_langs)[:cap]):
        head = heads[u]
        pools = {
            "block": [o for o in in_block[head.block] if o != u],
            "chapter": [o for o in in_chapter[head.chapter] if heads[o].block != head.block],
            "distant": [o for o in fam if heads[o].chapter != head.chapter],
        }
        eligible = [t for t in TIERS if len(pools[t]) >= CONFUSERS]
        for s in subcodes(u):
            named = [lang for lang in query_langs if lang in s.names]
            if not named:
                continue
            if not eligible:
                report.append(report_row("", s.line, s.code, "", "no_confusion_set", f"fewer than {CONFUSERS} other categories in every tier"))
                continue
            tier = eligible[int(_order(options.seed, "tier", s.code), 16) % len(eligible)]
            confusers = sorted(pools[tier], key=lambda o, s=s: _order(options.seed, "confuser", s.code, o))[:CONFUSERS]
            for lang in named:
                qid = f"{lang}:{s.code}"
                dq.append((lang, s.code, s.names[lang], tier))
                for d in [u, *sorted(confusers)]:
                    dc.append((qid, d))
                    dr.append((qid, d, int(d == u)))
                    dd.add(d)
    tasks["discrimination"] = {"queries": dq, "docs": [(d, "en") for d in sorted(dd)], "qrels": dr, "candidates": dc}

    # monolingual: each three-character code (with subcodes) to one eligible language
    assigned: dict[str, list[str]] = {lang: [] for lang in langs}
    for u in by_family["monolingual"]:
        subs = subcodes(u)
        if not subs:
            continue
        eligible = [lang for lang in langs if lang in heads[u].names and any(lang in s.names for s in subs) and (cap is None or len(assigned[lang]) < cap)]
        if eligible:
            assigned[min(eligible, key=lambda la: (len(assigned[la]), langs.index(la)))].append(u)
    for lang in langs:
        mq, mr = [], []
        for u in sorted(assigned[lang]):
            for s in subcodes(u):
                if lang in s.names:
                    mq.append((lang, s.code, s.names[lang], None))
                    mr.append((f"{lang}:{s.code}", u, 1))
        tasks[f"monolingual_{lang}"] = {
            "queries": mq,
            "docs": [(u, lang) for u in sorted(assigned[lang])],
            "qrels": mr,
            "candidates": None,
        }
    for name, part in tasks.items():
        _hold_out_near_documents(name, part, icd, report)
    _hold_out_overlaps(tasks, icd, report)
    return Split(tasks, report)


def _drop_queries(part: dict[str, Any], held: set[int]) -> None:
    """Remove the queries at positions ``held`` of a task, with their judgments and candidates."""
    if not held:
        return
    drop = {f"{part['queries'][i][0]}:{part['queries'][i][1]}" for i in held}
    part["queries"] = [q for i, q in enumerate(part["queries"]) if i not in held]
    part["qrels"] = [r for r in part["qrels"] if r[0] not in drop]
    if part["candidates"] is not None:
        part["candidates"] = [r for r in part["candidates"] if r[0] not in drop]


def _hold_out_near_documents(name: str, part: dict[str, Any], icd: Icd, report: list[dict[str, Any]]) -> None:
    """Hold out each query equal to, or a near duplicate (cosine >= GUARD) of, its relevant document's title or text.

    The measure is the identity contract's (:func:`medbench_core.taskdata.contracts.identity.pair_similarity`),
    so the task it then judges passes it (its threshold is 0.9)."""
    from medbench_core.taskdata.contracts.identity import pair_similarity

    doc_lang = dict(part["docs"])
    relevant = {q: d for q, d, r in part["qrels"] if r > 0}
    rows, q_texts, d_texts = [], [], []
    for i, (lang, code, text, _) in enumerate(part["queries"]):
        d = relevant[f"{lang}:{code}"]
        doc = document_row(icd, d, doc_lang[d])
        for fld in ("title", "text"):
            rows.append((i, d, fld, doc[fld]))
            q_texts.append(text)
            d_texts.append(doc[fld])
    if not rows:
        return
    equal, cosine = pair_similarity(q_texts, d_texts)
    held: dict[int, tuple[float, bool, str, str, str]] = {}
    for (i, d, fld, shown), eq, cos in zip(rows, equal, cosine):
        if (eq or cos >= GUARD - 1e-9) and (i not in held or cos > held[i][0]):
            held[i] = (float(cos), bool(eq), d, fld, shown)
    for i, (cos, eq, d, fld, shown) in sorted(held.items()):
        lang, code, _, _ = part["queries"][i]
        what = "equals" if eq else f"cosine {cos:.3f} with"
        report.append(report_row("", icd.concepts[code].line, code, lang, "near_relevant_document", f"{name}: {what} the {fld} of {d} ({shown[:40]!r})"))
    _drop_queries(part, set(held))


def _hold_out_overlaps(tasks: dict[str, dict[str, Any]], icd: Icd, report: list[dict[str, Any]]) -> None:
    """Hold out each query equal or near (cosine >= GUARD) to a query of an earlier task of the split, in task order."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer

    from medbench_core.taskdata.contracts.overlap import normalise_query
    from medbench_core.taskdata.contracts.results import NGRAM_RANGE

    order = list(tasks)
    rows = [(t, i, normalise_query(q[2])) for t in order for i, q in enumerate(tasks[t]["queries"])]
    if not rows:
        return
    task_ix = np.array([order.index(t) for t, _, _ in rows])
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAM_RANGE, sublinear_tf=True, dtype=np.float32)
    x = vec.fit_transform([n for _, _, n in rows])
    held: dict[str, set[int]] = {t: set() for t in order}
    for k, t in enumerate(order[1:], start=1):
        mine = np.flatnonzero(task_ix == k)
        earlier = np.flatnonzero(task_ix < k)
        if not len(mine) or not len(earlier):
            continue
        sim = (x[mine] @ x[earlier].T).tocsr()
        for r in range(len(mine)):
            lo, hi = sim.indptr[r], sim.indptr[r + 1]
            if hi > lo and sim.data[lo:hi].max() >= GUARD - 1e-6:
                j = earlier[sim.indices[lo:hi][sim.data[lo:hi].argmax()]]
                _, qi, _ = rows[mine[r]]
                held[t].add(qi)
                lang, code, _, _ = tasks[t]["queries"][qi]
                ot, oi, _ = rows[j]
                olang, ocode, _, _ = tasks[ot]["queries"][oi]
                report.append(
                    report_row(
                        "",
                        icd.concepts[code].line,
                        code,
                        lang,
                        "held_out_overlap",
                        f"{t}: near {ot} query {olang}:{ocode} (cosine {sim.data[lo:hi].max():.3f})",
                    )
                )
    for t in order:
        _drop_queries(tasks[t], held[t])


# --- kept between processes (ReadContext.share with a Kept): the package read and its split, as JSON --------------------


def split_to_json(value: tuple[Icd, Split]) -> dict[str, Any]:
    """``(icd, split)`` as JSON-able data (:func:`split_from_json` gives back an equal pair)."""
    icd, split = value
    return {"icd": dataclasses.asdict(icd), "split": dataclasses.asdict(split)}


def split_from_json(data: dict[str, Any]) -> tuple[Icd, Split]:
    """The ``(icd, split)`` :func:`split_to_json` wrote: JSON's lists made tuples again where the split built tuples."""
    i, s = data["icd"], data["split"]
    icd = Icd(
        concepts={code: Concept(**c) for code, c in i["concepts"].items()},
        titles=i["titles"],
        chapter_number=i["chapter_number"],
        report=i["report"],
        lineage=tuple(i["lineage"]),
        version=i["version"],
    )
    rows = ("queries", "docs", "qrels", "candidates")
    tasks = {name: {k: (v if k not in rows or v is None else [tuple(r) for r in v]) for k, v in part.items()} for name, part in s["tasks"].items()}
    return icd, Split(tasks, s["report"])
