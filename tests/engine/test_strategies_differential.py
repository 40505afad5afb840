"""differential_*: the runtime's strategies on the same random programs (non-recursive, and
linear, non-linear and mutual recursion with negation and aggregates above it; some reading
a switch, an input of no columns) and the same random batches give identical relations and
deltas after every commit: recompute, dbsp everywhere, auto (sensitivity-index strata
below, DBSP strata for recursion, in one program) and, without recursion, sensitivity
everywhere; an engine saved and loaded between commits continues the same; and the same
programs over string columns, with facts stated in the program, and with a derived
functional predicate (the same error at the same commit, or the same results)."""

import re

from hypothesis import given, note
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.errors import DeltalogError
from deltalog.engine.runtime import IncrementalEngine, make_engine
from tests.engine.dbsp.recursive_programs import programs_with_facts, recursive_programs
from tests.engine.programs import as_columns, as_deltas, edb_batches, edb_data, programs


def _strategies_agree(text, data, batches, relations=()) -> None:
    """Every strategy on ``text`` (recompute, auto, dbsp, and sensitivity without
    recursion) loads ``data`` and applies each of ``batches``: the same deltas and the same
    derived relations (and ``relations``) as the recompute after every commit."""
    note(text)
    prog = load_program(text)
    recursive = any(s.recursive for s in prog.strata)
    names = ["recompute", "auto", "dbsp"] + ([] if recursive else ["sensitivity"])
    engines = {name: make_engine(prog, data, name) for name in names}
    names.append("auto, columns in")  # (the inputs by column, as a pipeline loads them)
    engines[names[-1]] = IncrementalEngine(prog, as_columns(prog, data), "auto")
    for deltas in batches:
        outs = {name: e.apply(deltas) for name, e in engines.items()}
        for name in names[1:]:
            assert outs[name] == outs["recompute"], (name, deltas)
            for p in (*prog.idb, *relations):
                assert engines[name].relation(p) == engines["recompute"].relation(p), (name, p)


@given(text=recursive_programs(flags=True), data=edb_data(flags=True),
       steps=edb_batches(flags=True))
def test_differential_every_strategy_agrees(text, data, steps):
    _strategies_agree(text, data, [as_deltas(batch) for batch in steps])


@given(text=recursive_programs(flags=True), data=edb_data(flags=True),
       steps=edb_batches(flags=True), cut=st.integers(0, 4))
def test_differential_saved_and_loaded_state_continues_the_same(text, data, steps, cut):
    """An engine saved after ``cut`` commits and loaded again (a new run of the pipeline)
    gives the same deltas from then on as one that never stopped."""
    prog = load_program(text)
    straight = IncrementalEngine(prog, data, "auto")
    resumed = IncrementalEngine(prog, data, "auto")
    for i, batch in enumerate(steps):
        if i == cut:
            resumed = IncrementalEngine.loads(resumed.dumps())
        deltas = as_deltas(batch)
        assert resumed.apply(deltas) == straight.apply(deltas)
    for p in prog.idb:
        assert resumed.relation(p) == straight.relation(p)


_CONSTANT = re.compile(r'(?<![\w"])(\d+)(?![\w"])')


def _as_strings(text: str) -> str:
    """The program over string columns: int declarations made string ones and each
    integer constant ``n`` the string ``"s<n>"`` (a program without arithmetic)."""
    decls = [line for line in text.splitlines() if line.startswith(".decl")]
    rules = [line for line in text.splitlines() if not line.startswith(".decl")]
    return "\n".join([*(d.replace(": int", ": string") for d in decls),
                      *(_CONSTANT.sub(r'"s\1"', line) for line in rules)]) + "\n"


def _strings(rows):
    return {tuple(f"s{v}" for v in row) for row in rows}


@given(text=recursive_programs(flags=True, arithmetic=False) | programs(
           recursion=False, complements=True, flags=True, arithmetic=False),
       data=edb_data(flags=True), steps=edb_batches(flags=True))
def test_differential_every_strategy_agrees_over_strings(text, data, steps):
    """The same over string columns (their codes are a dictionary's, not the values)."""
    _strategies_agree(
        _as_strings(text), {name: _strings(rows) for name, rows in data.items()},
        [{name: {next(iter(_strings([row]))): w for row, w in d.items()}
          for name, d in as_deltas(batch).items()} for batch in steps])


@given(text=programs_with_facts(), data=edb_data(flags=True), steps=edb_batches(flags=True))
def test_differential_every_strategy_agrees_with_program_facts(text, data, steps):
    _strategies_agree(text, data, [as_deltas(batch) for batch in steps], ("e", "on"))


# A functional predicate g[a] = b derived (its second value for a key is DL302) and read.
_FUNCTIONAL_RULES = ["g[x] = y :- e(x, y), x < y.", "g[x] = y :- e(x, y), !f(x, _).",
                     "g[x] = y :- f(x, y), u(y)."]
_FUNCTIONAL_READS = ["h(x, z) :- g[x] = y, e(y, z).", "h(x, y) :- u(x), g[x] = y.",
                     "h(x, x) :- u(x), !g[x] = 2."]


@st.composite
def _with_functional(draw):
    text = draw(programs(recursion=False, flags=True)).replace(
        ".decl u(a: int)\n", ".decl u(a: int)\n.decl g[a: int] = b: int\n")
    rules = draw(st.lists(st.sampled_from(_FUNCTIONAL_RULES), min_size=1, max_size=2,
                          unique=True))
    reads = draw(st.lists(st.sampled_from(_FUNCTIONAL_READS), max_size=2, unique=True))
    return text + "\n".join(rules + reads) + "\n"


def _outcome(fn):
    """What ``fn()`` gave, or the error code it raised."""
    try:
        return "ok", fn()
    except DeltalogError as exc:
        return "error", exc.code


@given(text=_with_functional(), data=edb_data(flags=True), steps=edb_batches(flags=True))
def test_differential_every_strategy_agrees_on_functional_heads(text, data, steps):
    """With a derived functional predicate: every strategy raises the same error at the
    same load or commit (a second value for a key), or gives the recompute's deltas and
    relations."""
    note(text)
    prog = load_program(text)
    names = ["recompute", "auto", "dbsp", "sensitivity"]
    loads = {name: _outcome(lambda name=name: make_engine(prog, data, name)) for name in names}
    assert len({kind for kind, _ in loads.values()}) == 1, loads
    if loads["recompute"][0] == "error":
        assert len({code for _, code in loads.values()}) == 1, loads
        return
    engines = {name: engine for name, (_, engine) in loads.items()}
    for batch in steps:
        deltas = as_deltas(batch)
        outs = {name: _outcome(lambda e=e, d=deltas: e.apply(d)) for name, e in engines.items()}
        assert all(out == outs["recompute"] for out in outs.values()), (deltas, outs)
        if outs["recompute"][0] == "error":
            return
        for name in names[1:]:
            for p in prog.idb:
                assert engines[name].relation(p) == engines["recompute"].relation(p), (name, p)
