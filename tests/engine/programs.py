"""Hypothesis strategies for random programs over tiny domains, so that joins, negations,
cancellations and recursion actually happen. Shared by the engine's property tests."""

from typing import Any

from hypothesis import strategies as st

EDB_DECLS = ".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n.decl u(a: int)\n"
EDB_ARITY = {"e": 2, "f": 2, "u": 1}
# With ``flags``: an input of no columns, a switch a rule reads as ``on()`` or ``!on()``
# (the engine's suites only: a table needs a column).
FLAG_DECL = ".decl on()\n"
FLAGS = {**EDB_ARITY, "on": 0}
VARS = ("x", "y", "z", "w")
DOMAIN = st.integers(min_value=0, max_value=4)


@st.composite
def edb_data(draw, flags: bool = False):
    return {
        name: draw(st.sets(st.tuples(*([DOMAIN] * arity)), max_size=12))
        for name, arity in (FLAGS if flags else EDB_ARITY).items()
    }


def atom_args(draw, arity: int, const, bound: list[str]) -> list[str]:
    """The arguments of one positive atom: mostly variables of ``VARS`` (appended to
    ``bound``), some constants (``const()`` gives one's text), some ``_``."""
    args = []
    for _ in range(arity):
        kind = draw(st.sampled_from(["var", "var", "var", "const", "wild"]))
        if kind == "var":
            v = draw(st.sampled_from(VARS))
            args.append(v)
            bound.append(v)
        elif kind == "const":
            args.append(const())
        else:
            args.append("_")
    return args


def positive_body(draw, arity: dict[str, int], const) -> tuple[list[str], list[str]]:
    """One to four positive atoms over the relations of ``arity`` (``atom_args``), and
    ``u(x)`` when none binds a variable: the body's items and its bound variables."""
    body: list[str] = []
    bound: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        pred = draw(st.sampled_from(sorted(arity)))
        body.append(f"{pred}({', '.join(atom_args(draw, arity[pred], const, bound))})")
    if not bound:
        body.append("u(x)")
        bound.append("x")
    return body, bound


def draw_change(data, rows: dict[str, Any], most: int) -> dict[str, dict[Any, int]]:
    """A commit's change: 1 to ``most`` rows, each an insertion or an erasure of a row
    of a relation drawn from ``rows`` (relation -> strategy of its rows)."""
    deltas: dict[str, dict[Any, int]] = {}
    for _ in range(data.draw(st.integers(1, most))):
        name = data.draw(st.sampled_from(sorted(rows)))
        row = data.draw(rows[name])
        deltas.setdefault(name, {})[row] = data.draw(st.sampled_from([1, -1]))
    return deltas


def head_or_aggregate(draw, i: int, names: list[str], args: list[str], body: list[str],
                      head_arity: int) -> tuple[str, bool]:
    """The rule of the i-th IDB predicate over ``body``: now and then (True) an aggregate
    ``a{i}[key] = n`` (count, or min or max of one of ``args``) keyed by one of ``names``,
    else ``p{i}`` of ``head_arity`` of ``names``."""
    if draw(st.integers(0, 4)) == 0:
        func = draw(st.sampled_from(["count", "min", "max"]))
        arg = "" if func == "count" else draw(st.sampled_from(args))
        return (f"a{i}[{draw(st.sampled_from(names))}] = n <- "
                f"agg<<n = {func}({arg})>> {', '.join(body)}."), True
    head = [draw(st.sampled_from(names)) for _ in range(head_arity)]
    return f"p{i}({', '.join(head)}) :- {', '.join(body)}.", False


@st.composite
def rule_text(draw, head: str, head_arity: int, positive: dict[str, int],
              negative: dict[str, int], allow_agg: bool, flags: bool = False,
              arithmetic: bool = True):
    """One safe rule for ``head`` over the predicates it may use (with ``flags``, some
    read the switch ``on()`` or ``!on()``; without ``arithmetic``, none computes)."""
    n_atoms = draw(st.integers(1, 3))
    body: list[str] = []
    bound: list[str] = []
    names = sorted(positive)
    for _ in range(n_atoms):
        pred = draw(st.sampled_from(names))
        args = atom_args(draw, positive[pred], lambda: str(draw(DOMAIN)), bound)
        body.append(f"{pred}({', '.join(args)})")
    if not bound:
        pred = names[0]
        body.append(f"{pred}({', '.join(['x'] * positive[pred])})")
        bound.append("x")
    bound_set = sorted(set(bound))
    if draw(st.booleans()):
        a, b = draw(st.sampled_from(bound_set)), draw(st.sampled_from(bound_set))
        op = draw(st.sampled_from(["<", "<=", "!=", "=", ">"]))
        body.append(f"{a} {op} {b}")
    if arithmetic and draw(st.booleans()):
        a = draw(st.sampled_from(bound_set))
        t = draw(st.sampled_from(["t", "s"]))
        body.append(f"{t} = {a} + {draw(st.integers(-1, 2))}")
        # Keep computed values inside the domain: `p(t) :- p(x), t = x + 1` has no finite
        # fixpoint otherwise, and every evaluator would run forever.
        body.append(f"{t} >= 0")
        body.append(f"{t} <= 4")
        bound_set = sorted({*bound_set, t})
    if negative and draw(st.booleans()):
        pred = draw(st.sampled_from(sorted(negative)))
        args = [draw(st.sampled_from([*bound_set, "_"])) for _ in range(negative[pred])]
        body.append(f"!{pred}({', '.join(args)})")
    if flags and draw(st.integers(0, 2)) == 0:
        body.insert(draw(st.integers(0, len(body))), draw(st.sampled_from(["on()", "!on()"])))
    if allow_agg and draw(st.integers(0, 4)) == 0:
        key = draw(st.sampled_from(bound_set))
        func = draw(st.sampled_from(["count", "sum", "min", "max"] if arithmetic else
                                    ["count", "min", "max"]))
        arg = "" if func == "count" else draw(st.sampled_from(bound_set))
        return f"{head}[{key}] = res <- agg<<res = {func}({arg})>> {', '.join(body)}."
    head_args = [draw(st.sampled_from(bound_set)) for _ in range(head_arity)]
    return f"{head}({', '.join(head_args)}) :- {', '.join(body)}."


@st.composite
def complement_rules(draw, first: int, available: dict[str, int]):
    """Two or three IDB predicates from ``p{first}`` on, in the shape complement iteration
    recognizes (Veldhuizen 2014, §3.1.2): a filter ``s(x̄) :- t(x̄), ...`` of a relation t (so
    S ⊆ T; sometimes a second filter rule, sometimes a filter of a filter) and a rule
    ``r(...) :- t(x̄), !s(x̄), ...`` that reads T \\ S, with the variables of x̄ in a random
    order against the rest of the body."""
    names = sorted(available)
    t = draw(st.sampled_from(names))
    k = available[t]
    xs = list(draw(st.permutations(VARS[:3]))[:k])  # distinct: x̄ in a random order
    tx = f"{t}({', '.join(xs)})"

    def extra() -> str:
        pred = draw(st.sampled_from(names))
        args = ", ".join(draw(st.sampled_from([*xs, "w", str(draw(DOMAIN))]))
                         for _ in range(available[pred]))
        return f"{pred}({args})"

    def filter_body() -> str:
        kind = draw(st.sampled_from(["pos", "neg", "cmp"]))
        if kind == "cmp":
            return f"{draw(st.sampled_from(xs))} {draw(st.sampled_from(['<', '!=', '>=']))} " \
                   f"{draw(DOMAIN)}"
        atom = extra()
        if kind == "neg":
            return "!" + atom.replace("w", "_")
        return atom

    s = f"p{first}"
    rules = [f"{s}({', '.join(xs)}) :- {tx}, {filter_body()}."]
    if draw(st.booleans()):
        rules.append(f"{s}({', '.join(xs)}) :- {filter_body()}, {tx}.")
    nxt = first + 1
    if draw(st.booleans()):  # a filter of the filter: contained in t through s
        inner = f"p{nxt}"
        rules.append(f"{inner}({', '.join(xs)}) :- {s}({', '.join(xs)}), {filter_body()}.")
        s, nxt = inner, nxt + 1
    body = [tx, f"!{s}({', '.join(xs)})"]
    if draw(st.booleans()):
        body.insert(draw(st.integers(0, 1)), extra())
    bound = [*xs, *(["w"] if any("w" in b for b in body) else [])]
    r = f"p{nxt}"
    if draw(st.integers(0, 3)) == 0:
        key = draw(st.sampled_from(bound))
        func = draw(st.sampled_from(["count", "max"]))
        arg = "" if func == "count" else draw(st.sampled_from(bound))
        rules.append(f"{r}[{key}] = res <- agg<<res = {func}({arg})>> {', '.join(body)}.")
    else:
        head = [draw(st.sampled_from(bound)) for _ in range(draw(st.integers(1, 2)))]
        rules.append(f"{r}({', '.join(head)}) :- {', '.join(body)}.")
    return rules


@st.composite
def programs(draw, recursion: bool = True, aggregates: bool = True,
             complements: bool = False, flags: bool = False, arithmetic: bool = True):
    """2-3 IDB predicates p0, p1, ...; p_i may use EDB and p_j (j < i) positively and
    negatively, and itself positively when ``recursion`` (so the program is stratified).
    With ``complements``, often followed by the shape of ``complement_rules``; with
    ``flags``, rules read the switch ``on()`` (``edb_data`` and ``edb_changes`` with
    ``flags`` give it rows); without ``arithmetic``, no rule computes a value."""
    n_idb = draw(st.integers(1, 3))
    arities = {f"p{i}": draw(st.integers(1, 2)) for i in range(n_idb)}
    rules: list[str] = []
    agg_preds: set[str] = set()
    for i in range(n_idb):
        head = f"p{i}"
        earlier = {p: a for p, a in arities.items() if int(p[1:]) < i and p not in agg_preds}
        positive = {**EDB_ARITY, **earlier}
        negative = {**EDB_ARITY, **earlier}
        n_rules = draw(st.integers(1, 2))
        use_agg = aggregates and arities[head] == 2 and draw(st.integers(0, 3)) == 0
        if use_agg:
            rules.append(draw(rule_text(head, 2, positive, negative, True, flags,
                                        arithmetic).filter(
                lambda r: "agg<<" in r)))
            agg_preds.add(head)
            continue
        for k in range(n_rules):
            pos = dict(positive)
            if recursion and k > 0:
                pos[head] = arities[head]
            rules.append(draw(rule_text(head, arities[head], pos, negative, False, flags,
                                        arithmetic)))
    if complements and draw(st.integers(0, 2)) > 0:
        usable = {**EDB_ARITY, **{p: a for p, a in arities.items() if p not in agg_preds}}
        rules.extend(draw(complement_rules(n_idb, usable)))
    return EDB_DECLS + (FLAG_DECL if flags else "") + "\n".join(rules) + "\n"


def apply_and_check_deltas(engine, prog, deltas) -> None:
    """Apply ``deltas``; the returned IDB deltas must be exactly what changed in each
    relation (inserted rows +1, erased rows -1), which the oracle tests then compare with a
    recompute."""
    before = {p: engine.relation(p) for p in prog.idb}
    out = engine.apply(deltas)
    for p in prog.idb:
        after = engine.relation(p)
        assert {r for r, w in out.get(p, {}).items() if w > 0} == after - before[p], p
        assert {r for r, w in out.get(p, {}).items() if w < 0} == before[p] - after, p


def edb_changes(max_size: int = 6, flags: bool = False):
    """One commit's changes: 1..``max_size`` (EDB row, +1 or -1) pairs over the tiny domain
    (a row may repeat; ``as_deltas`` keeps its last weight)."""
    row = st.one_of(*[st.tuples(st.just(n), st.tuples(*([DOMAIN] * a)))
                      for n, a in (FLAGS if flags else EDB_ARITY).items()])
    return st.lists(st.tuples(row, st.sampled_from([1, -1])), min_size=1, max_size=max_size)


def edb_batches(max_batches: int = 5, max_size: int = 6, flags: bool = False):
    """1..``max_batches`` commits of ``edb_changes``."""
    return st.lists(edb_changes(max_size, flags), min_size=1, max_size=max_batches)


def as_deltas(changes) -> dict[str, dict]:
    """``edb_changes`` as the ``{relation: {row: weight}}`` an engine applies."""
    deltas: dict[str, dict] = {}
    for (name, row), w in changes:
        deltas.setdefault(name, {})[row] = w
    return deltas


def as_columns(prog, data):
    """``data`` (rows by relation) by column, as a pipeline gives a load its inputs: ints
    and floats as numpy arrays, strings dictionary-encoded (values and indices)."""
    import numpy as np

    from deltalog.engine.columnar.evaluate import Columns, Dictionary

    out = {}
    for name, rows in data.items():
        rows = sorted(rows, key=repr)
        cols = []
        for i, c in enumerate(prog.schemas[name].columns):
            values = [r[i] for r in rows]
            if c.type == "string":
                distinct = sorted(set(values))
                cols.append(Dictionary(np.array(distinct, dtype=object),
                                       np.array([distinct.index(v) for v in values],
                                                np.int32)))
            else:
                cols.append(np.array(values, np.float64 if c.type == "float" else np.int64))
        out[name] = Columns(cols, len(rows) if not cols else 0)
    return out
