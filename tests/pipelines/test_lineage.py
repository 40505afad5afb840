"""Row-level lineage on a pipeline's Delta tables: explain (a minimal derivation down to EDB
rows, each with the version since which it is present), why-not, and what-if (each
stratum's maintenance on its saved state, nothing written: equal to the difference of two
recomputes, with every table and state file byte-identical afterwards)."""

import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deltalog.engine.errors import DeltalogError
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import lineage
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import (
    EDGES_V1,
    NODES,
    START,
    edb_tables,
    make_pipeline,
    run_all,
)


def _fingerprint(*folders: Path) -> dict[str, str]:
    """Every file under ``folders`` (tables, logs, saved states) by content hash."""
    out = {}
    for folder in folders:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


@pytest.fixture
def pipeline(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    write_edb(root, spec, edb_tables([*EDGES_V1, (4, 7)]))  # edge(4, 7) at version 2
    run_all(spec, root)
    return spec, root


def test_explain_goes_down_to_edb_rows_with_their_versions(pipeline):
    spec, root = pipeline
    lines = lineage.explain(root, spec, "path(1, 7)")
    text = "\n".join(lines)
    assert lines[0].startswith("path(1, 7)   [rule ")
    assert "edge(4, 7)   [edb fact] (tiny/edb/edge, since version 2)" in text
    assert "edge(3, 4)   [edb fact] (tiny/edb/edge, since version 1)" in text
    alts = lineage.explain(root, spec, "unreachable(7, 1)", alternatives=3)
    assert "not path(7, 1)" in "\n".join(alts)


def test_explain_of_an_absent_row_says_so_and_why_not_says_why(pipeline):
    spec, root = pipeline
    with pytest.raises(DeltalogError, match="is not in the table of 'path'"):
        lineage.explain(root, spec, "path(7, 1)")
    reasons = lineage.why_not(root, spec, "path(7, 1)")
    assert len(reasons) == 2 and all("gets past" in r for r in reasons)


def test_a_fact_in_the_wrong_form_is_a_clear_error(pipeline):
    spec, root = pipeline
    with pytest.raises(DeltalogError, match="error DL"):
        lineage.explain(root, spec, "path(1, 'x')")
    with pytest.raises(DeltalogError, match="EDB facts only"):
        lineage.what_if(root, spec, delete=["path(1, 2)"])


edges = st.tuples(st.integers(1, 7), st.integers(1, 7))


def _two_recomputes(spec, now, after) -> dict:
    """Each IDB relation's change from the edges ``now`` to ``after``, by the naive
    evaluator (relations that do not change left out)."""
    inputs = {"node": set(NODES), "start": set(START)}
    old = evaluate_naive(spec.program, {**inputs, "edge": now})
    new = evaluate_naive(spec.program, {**inputs, "edge": after})
    expected = {}
    for pred in spec.idb_tables:
        delta = {r: 1 for r in new[pred] - old[pred]}
        delta.update({r: -1 for r in old[pred] - new[pred]})
        if delta:
            expected[pred] = delta
    return expected


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
# a fact deleted twice and inserted is there after: no change
@example(delete=[(3, 4), (3, 4)], insert=[(3, 4)])
@given(delete=st.lists(st.sampled_from([*EDGES_V1, (4, 7)]), max_size=3),
       insert=st.lists(edges, max_size=3))
def test_what_if_equals_two_recomputes_and_writes_nothing(pipeline, delete, insert):
    spec, root = pipeline
    before = _fingerprint(Path(root))
    now = {*EDGES_V1, (4, 7)}
    after = (now - set(delete)) | set(insert)
    change = lineage.what_if(
        root, spec,
        delete=[f"edge({a}, {b})" for a, b in delete],
        insert=[f"edge({a}, {b})" for a, b in insert],
    )
    assert _fingerprint(Path(root)) == before
    assert change == _two_recomputes(spec, now, after)


def test_what_if_catches_up_with_versions_no_run_consumed_yet(pipeline):
    spec, root = pipeline
    write_edb(root, spec, edb_tables([*EDGES_V1, (4, 7), (7, 1)]))  # not materialized
    change = lineage.what_if(root, spec, delete=["edge(7, 1)"])
    assert ("path" in change) and all(w == -1 for w in change["path"].values())
    assert (4, 1) in change["path"]  # relative to the current tables, not the old state
    lines = lineage.format_change(spec.program, change)
    assert "- path(4, 1)" in lines


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moved=st.lists(edges, min_size=1, max_size=3),
       delete=st.lists(st.sampled_from([*EDGES_V1, (4, 7)]), max_size=2),
       insert=st.lists(edges, max_size=2))
def test_what_if_on_inputs_no_run_consumed_yet_equals_two_recomputes(pipeline, moved,
                                                                    delete, insert):
    """The inputs moved on and no run followed: every stratum's answer is relative to the
    current inputs, the strata above the first included (their input tables, the lower
    strata's, are behind too)."""
    spec, root = pipeline
    now = {*EDGES_V1, (4, 7), *moved}
    write_edb(root, spec, edb_tables(sorted(now)))  # not materialized
    after = (now - set(delete)) | set(insert)
    change = lineage.what_if(
        root, spec,
        delete=[f"edge({a}, {b})" for a, b in delete],
        insert=[f"edge({a}, {b})" for a, b in insert],
    )
    assert change == _two_recomputes(spec, now, after)


def test_what_if_behind_with_a_lower_state_lost_is_still_relative_to_the_inputs(pipeline):
    """The stratum of path has no saved state (lost) and the inputs moved on: it is loaded
    from the current inputs, and how that differs from its table reaches the strata
    above, as a caught-up state's change does."""
    from deltalog.pipelines.state_store import drop_state, state_path

    spec, root = pipeline
    now = {*EDGES_V1, (4, 7), (7, 1)}
    write_edb(root, spec, edb_tables(sorted(now)))  # not materialized
    assert drop_state(state_path(root, spec.name, spec.stratum_of("path")))
    change = lineage.what_if(root, spec, delete=["edge(7, 1)"])
    assert change == _two_recomputes(spec, now, now - {(7, 1)})
    assert "unreachable" in change


def test_explain_of_a_row_the_moved_inputs_no_longer_give_says_the_table_is_behind(pipeline):
    """An input row deleted and no run since: the row is still in the table, and explain
    says the table stands for older inputs (not that the row is not in the table)."""
    spec, root = pipeline
    write_edb(root, spec, edb_tables(EDGES_V1))  # edge(4, 7) deleted, not materialized
    with pytest.raises(DeltalogError, match=r"is in the table of 'path' .* edge version 2; "
                       r"they are now at edge version 3, from which it does not follow"):
        lineage.explain(root, spec, "path(1, 7)")


def test_the_command_line(pipeline, capsys):
    from deltalog.pipelines.cli import main

    spec, root = pipeline
    base = [str(spec.directory), "--warehouse", str(root)]
    assert main(["explain", *base, "path(1, 7)"]) == 0
    assert "edge(4, 7)   [edb fact]" in capsys.readouterr().out
    assert main(["explain", *base, "path(7, 1)", "--why-not"]) == 0
    assert "gets past" in capsys.readouterr().out
    assert main(["what-if", *base, "--delete", "edge(4, 7)"]) == 0
    assert "- path(1, 7)" in capsys.readouterr().out.splitlines()
    assert main(["explain", *base, "path(1, "]) == 1
    err = capsys.readouterr().err
    assert err.startswith("<argument>:1:") and "error DL1" in err and "Traceback" not in err


FACTS_PROGRAM = """\
.decl e(x: int, y: int)
.decl on()
e(1, 2).
on().
p(x) :- e(x, _).
q(x) :- e(x, _), on().
r(x) :- e(x, _), !e(_, x).
"""
FACTS_BINDING = """\
[edb]
e = "m/edb/e"

[idb]
p = "m/idb/p"
q = "m/idb/q"
r = "m/idb/r"
"""


def test_explain_rests_on_the_facts_the_program_states(tmp_path):
    """A row derived from a fact the program states for an input (in no table) or through
    a switch stated as a fact is explained down to that fact, as the tables hold it."""
    import pyarrow as pa

    from tests.local import write_pipeline

    spec = write_pipeline(tmp_path, "m", FACTS_PROGRAM, FACTS_BINDING)
    root = tmp_path / "warehouse"
    write_edb(root, spec, {"e": pa.table({"x": [5], "y": [6]})})
    run_all(spec, root)
    text = "\n".join(lineage.explain(root, spec, "p(1)"))
    assert text.startswith("p(1)   [rule ") and "e(1, 2)   [program fact]" in text
    text = "\n".join(lineage.explain(root, spec, "q(5)"))
    assert "on()   [program fact]" in text and "e(5, 6)   [edb fact]" in text
    text = "\n".join(lineage.explain(root, spec, "r(1)"))
    assert "· not e(_2, 1)" in text and "e(1, 2)   [program fact]" in text
    with pytest.raises(DeltalogError, match="is not in the table of 'p'"):
        lineage.explain(root, spec, "p(2)")


def test_what_if_under_a_changed_program_reads_the_tables_not_the_old_state(tmp_path):
    """A state saved by another program (its stratum digest differs) is not what a
    question about the current program runs on: the stratum loads from its tables."""
    from deltalog.pipelines.spec import load_pipeline

    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    text = (tmp_path / "tiny" / "program.dl").read_text(encoding="utf-8")
    (tmp_path / "tiny" / "program.dl").write_text(text.replace(
        "path(x, y) :- edge(x, y).", "path(x, y) :- edge(y, x)."), encoding="utf-8")
    reversed_ = load_pipeline(tmp_path / "tiny")
    change = lineage.what_if(root, reversed_, delete=["edge(3, 4)"])
    expected = _two_recomputes(reversed_, set(EDGES_V1), set(EDGES_V1) - {(3, 4)})
    assert change["path"] == expected["path"]
