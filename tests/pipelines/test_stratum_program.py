"""A stratum as its own program: an engine built on the sub-program (upstream IDB predicates
as EDB) gives what evaluating the whole program gives, for every stratum of the Debian and
WordNet pipelines, and keeps giving it after a change to its inputs."""

import pyarrow.compute as pc
import pytest

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.evaluate import evaluate
from deltalog.engine.runtime import IncrementalEngine, diff
from deltalog.pipelines.spec import load_pipeline
from deltalog.pipelines.stratum_program import stratum_digest, stratum_program
from deltalog.schemas.relation import arrow_to_rows


@pytest.fixture(scope="module")
def debian_slice() -> dict[str, dict[str, set]]:
    """Two EDB versions: the packages of sections admin and shells (with their depends and
    provides), and the same minus a fifth of the depends plus the vulnerable list."""
    from deltalog.examples.debian.snapshot import load_snapshot

    tables = load_snapshot(1)
    package = tables["package"]
    package = package.filter(pc.is_in(package["section"], pc.cast(["admin", "shells"], "string")))
    names = package["name"].combine_chunks()
    v1 = {
        "package": arrow_to_rows(package),
        "depends": arrow_to_rows(
            tables["depends"].filter(pc.is_in(tables["depends"]["pkg"], names))
        ),
        "provides": arrow_to_rows(
            tables["provides"].filter(pc.is_in(tables["provides"]["pkg"], names))
        ),
        "vulnerable": set(),
    }
    dropped = set(sorted(v1["depends"])[::5])
    v2 = {
        **v1,
        "depends": v1["depends"] - dropped,
        "vulnerable": arrow_to_rows(tables["vulnerable"]) | {("bash",)},
    }
    return {"v1": v1, "v2": v2}


@pytest.mark.parametrize("name", ["debian", "wordnet"])
def test_sub_program_declares_inputs_as_edb(name):
    spec = load_pipeline(name)
    prog = spec.program
    for i, stratum in enumerate(prog.strata):
        sub = stratum_program(prog, i)
        assert sub.idb == tuple(sorted(stratum.preds))
        assert [s.preds for s in sub.strata] == [stratum.preds]
        assert set(sub.edb) == set(spec.upstream(stratum)) | (
            set(sub.edb) & set(prog.facts)  # fact-only EDB predicates have no table
        )
        for pred, schema in sub.schemas.items():
            assert schema.columns == prog.schemas[pred].columns
            assert schema.functional == prog.schemas[pred].functional
        assert stratum_digest(prog, i) == stratum_digest(prog, i)
    digests = {stratum_digest(prog, i) for i in range(len(prog.strata))}
    assert len(digests) == len(prog.strata)


def test_a_stratum_whose_rule_converts_a_variable_has_a_new_digest(monkeypatch):
    """A state saved before the analysis recorded which variables a binding converts
    (``Rule.casts``) holds what such a variable's first binder gave it (``5 / 2`` as 2 for
    x, a float): its stratum's digest is another, so the pipeline rebuilds that state; a
    stratum whose rules convert nothing keeps its digest."""
    import deltalog.engine.analysis.analyze as analysis

    text = (".decl a(x: int)\n.decl b(x: float)\n"
            "p(t) :- b(x), a(x), t = x / 2.\nq(x) :- a(x), x > 1.\n")
    prog = load_program(text)
    now = {s.preds: stratum_digest(prog, i) for i, s in enumerate(prog.strata)}
    monkeypatch.setattr(analysis, "with_casts", lambda program, types: program)
    before = load_program(text)
    assert not any(r.casts for r in before.program.rules)
    then = {s.preds: stratum_digest(before, i) for i, s in enumerate(before.strata)}
    assert now[("p",)] != then[("p",)] and now[("q",)] == then[("q",)]


def test_oracle_stratum_engines_equal_whole_program_evaluation(debian_slice):
    prog = load_pipeline("debian").program
    whole = {v: evaluate(prog, edb) for v, edb in debian_slice.items()}
    assert whole["v1"]["reaches"] and whole["v1"]["leaf"]
    assert whole["v1"]["reaches"] != whole["v2"]["reaches"]
    for i, stratum in enumerate(prog.strata):
        sub = stratum_program(prog, i)

        def inputs(v: str, sub=sub) -> dict[str, set]:
            return {
                p: set(debian_slice[v][p]) if p in debian_slice[v] else set(whole[v][p])
                for p in sub.edb
            }

        engine = IncrementalEngine(sub, inputs("v1"))
        for pred in stratum.preds:
            assert engine.relation(pred) == whole["v1"][pred], pred
        old, new = inputs("v1"), inputs("v2")
        out = engine.apply({p: diff(old[p], new[p]) for p in sub.edb if old[p] != new[p]})
        for pred in stratum.preds:
            assert engine.relation(pred) == whole["v2"][pred], pred
            assert out.get(pred, {}) == diff(whole["v1"][pred], whole["v2"][pred]), pred
