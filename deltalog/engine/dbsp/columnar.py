"""The DBSP stratum over columns: the nested-time algorithm of ``deltalog.engine.dbsp.stratum``
(births per fact and inner iteration, depths, Δc[t] as a sum of delta queries, ↑↑H on
the cumulative Δr, the inner loop that runs until nothing can change any more) on numpy
arrays.

A stratum qualifies (``columnar_reason`` is None) when every relation it
defines or reads has int, float or string columns (at least one; a functional relation's
key and value columns alike, a second value for a key found in the commit's new version),
and every rule is a conjunction of positive atoms (or none: the load starts the rule from
one empty row) with, beside them, comparisons and assignments over numbers (``+ - * /
%``; ints with C/SQL semantics, floats IEEE with no result where it is not finite,
``deltalog.engine.semantics``), comparisons of strings (``=``, ``!=`` on codes, an order
on the strings), and negations of lower strata; an int may fill a float column of the
head; a non-recursive stratum, unless it is one aggregate rule per predicate (then
``deltalog.engine.dbsp.aggregates`` keeps it; its delta queries run once, at inner
iteration 0). Constants and
repeated variables in atoms are
assignments of the plan (``deltalog.engine.join.plan.prepare``), and the head may hold
constants. An aggregate rule reads lower strata only (the language allows no recursion
through an aggregate): the maintainer of a non-recursive stratum of its own keeps it
(``bridged_aggregates``), and its rows of p enter as the input p@agg (p#j@agg for the
j-th of several aggregate rules of p). A variable x that
joins an int and a float column is a float (the analysis' ``Rule.casts``: ``x / 2`` gives
2.5 for 5); since an int column's codes are not a float's, the rule is rewritten
(``uncast``) to read x from the int columns as an int variable x~int, with ``x = x~int``
added: the join binds x~int from x (the int equal to it) or x from x~int (the float
equal to it), whichever it binds first, none where there is none. An assignment of a
value of the other number type to a variable converts it the same way
(``semantics.bind_as``). A negation's key set is coded in its variables' types, a
column of the other number type converted (a value with no number of the variable's
type equal to it is no key: no binding matches it).

A negation ``!n(...)`` is an input of its own: N', the keys (values of its variables the
body binds) for which a matching row of n exists, kept like an input relation (sorted
packed keys and a patch); the body's factor is 1 - N', so its delta query is seeded by
-ΔN', the keys whose existence the commit changed (``negation_change``, from n's old and
new versions). Negations alike in two rules share one key set.

Values are dictionary-encoded per column type (ids below 2^31). A row packs into one
int64 in a layout: the codes of some columns in the high 32 bits, of the others in the
low 32 bits, where a group of two or more columns is one code through the stratum's
dictionary of pairs (``_Packing``: (b, c, d) as the pair (b, (c, d))). A relation's
facts are keyed in its natural layout (first column high); a join reads an atom in the
layout its bound columns ask for (bound columns high, the variable it extends first in
the low half), sorted the first time a join asks for it and kept up to date after, so a
lookup by bound columns is two binary searches. A delta query is a vectorized generic
join (variable at a time, worst-case optimal): the seed's rows bind its variables; each
next variable is extended, row by row, from the atom with the fewest candidates among
those whose other variables are all bound, and checked against the others; when no atom
is that ready, an atom with some of its variables bound binds all of its free ones from
its rows.

State per defined relation of a recursive stratum: every fact it held since the last
compaction has an id; the keys sorted (a main part, and a young part and a nursery of
facts first seen since), sorted again in each other layout a join reads, a hash index
from key to id, and by id the depth and the births (a slice of (t, count) entries in a
pool). A commit gives the facts it touches (Δc ≠ 0 somewhere) slots in the order they
are first touched, gathers their old births once, and keeps their new depths by id
beside the old ones, so a join reads either version of a relation from the same arrays;
the births and depths change at the end of the commit. An iteration where nothing can
change is skipped: once o[t-1] = o[t-2] (no membership changed at depth t-1), the next
iteration to run is the first at which a touched fact changes by itself (its old depth,
or an old birth of an undecided one) or a term seeded by an input's change finds own
facts of depth t-1 agreeing with it (their old depths, looked up once per commit); none:
the commit is done, however deep the old facts go. The loops that walk touched facts one
at a time (hash probes, births gathered and merged, ↑↑H decisions, a view's ranges
checked by depth) are compiled with numba (``deltalog.engine.dbsp.kernels``); the rest
is whole-array numpy. A linear binary closure (``Linear``: one rule copying an input,
one joining the relation with an input on one variable) runs a commit's whole inner
loop in one compiled call instead (``deltalog.engine.dbsp.linear``): the same
iterations, facts and ids, without the tens of numpy calls per iteration that a change
of one edge otherwise costs, and reading the rows the changed input joins once per
commit (in the relation's old version, grouped by depth) where the generic steps read
them at every iteration; as fast or faster on changes of any size (to 1,000 rows
reaching 2.9 million facts).

A non-recursive stratum (whose functional heads, if any, have a key of one column) has
every fact at depth 0 with one derivation count, which a commit's Δc[0] changes: it
keeps sorted keys and a count per fact (``_Counts``), found by binary searches, and none
of the above; a functional head's keys are found by their high half.

Comparisons and assignments run on whole columns as soon as their variables are bound:
int and float codes turn into values through a mirror array of each code's value,
arithmetic is int64 with its overflows detected or float64 (an int meets a float as
Python converts it), and the rare column where an operand or a result leaves the 64-bit
integers (the language's integers are unbounded), or an int beyond 2^53 is compared with
a float (Python compares them exactly), is computed row by row with
``deltalog.engine.semantics``, so both kernels agree on every value. An order on strings
compares the decoded strings (codes are in the order values are first seen).
"""

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.analysis.typecheck import CAST_INT, uncast
from deltalog.engine.columnar.encoding import (
    Codes,
    Column,
    Dictionary,
    NotColumnar,
    int_table,
)
from deltalog.engine.columnar.evaluate import encode_table, rule_strings
from deltalog.engine.columnar.rows import Relation
from deltalog.engine.columnar.rules import CompiledRule
from deltalog.engine.dbsp import kernels, linear
from deltalog.engine.dbsp.stratum import (
    NegatedAtom,
    negated_atoms,
    negation_change,
    seeded_order,
)
from deltalog.engine.errors import NOT_SUPPORTED, DataError, NotSupportedError
from deltalog.engine.heads import change_conflict, check_functional
from deltalog.engine.join.plan import PlanAtom, PreparedRule, compare_assignments, prepare
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.segments import (
    CorruptSegment,
    SegmentSink,
    SegmentSource,
    SortedRun,
    write_run,
)
from deltalog.engine.semantics import (
    bind_as,
    coerce,
    compare,
    eval_expr,
    exact_as_floats,
    float_arith,
    floats_as_ints,
    ints_as_floats,
)
from deltalog.engine.storage import CodedRows, Delta, RelationStore, StratumMaintainer
from deltalog.engine.syntax.ast import Atom, BinOp, Const, Expr, Rule, Var, expr_vars
from deltalog.engine.values import Row, Value

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
Bool = NDArray[np.bool_]
Num = NDArray[Any]  # int64 or float64 values

LOW = np.int64((1 << 32) - 1)
NONE = np.int32(2**31 - 1)  # the depth of a non-member (and of an undecided fact)
TYPES = ("int", "string", "float")
F64 = NDArray[np.float64]
# Housekeeping thresholds (module-level so that tests can make them tiny): tombstones are
# purged past max(PURGE_MIN, a quarter of the ids); the births pool is compacted when it
# would grow and holds more than twice its live entries plus POOL_SLACK.
PURGE_MIN = 1024
POOL_SLACK = 1 << 16
YOUNG_MIN = 4096  # the young part joins the main one past max(this, an eighth of it)
# Facts first seen go to a nursery, which joins the young part past this many: a commit
# copies the nursery to insert into it, never the young part (up to an eighth of all).
NURSERY_MAX = 4096
# An input's patch (its keys changed since its sorted keys were written) is merged into
# them past this many keys: a saved state writes the patch, the keys only then.
PATCH_MAX = 4096
# A lookup of at most this many prefixes is one compiled call (binary searches inside),
# and so is summing a Z-set of at most four times as many pairs; larger ones use numpy
# (whose searches of sorted prefixes share their bounds, and whose sort is faster).
SMALL = 64
LINEAR_ROOM = 4096  # the touched facts' arrays a compiled loop starts with (then grown)
LINEAR_KEEP = 1 << 16  # and keeps for the next commit when they have room for at most this
_E64: I64 = np.zeros(0, np.int64)
_E32: I32 = np.zeros(0, np.int32)
_MIN = np.int64(-(2**63))
_NP_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
           ">": np.greater, ">=": np.greater_equal}


class _Slow(Exception):
    """An integer operand or result beyond int64: the column is computed row by row."""


def columnar_reason(prog: AnalyzedProgram, stratum: Stratum) -> str | None:
    """Why ``stratum`` cannot be maintained by the columnar kernel (None: it can)."""
    if not stratum.recursive and _one_rule_each(stratum) and not any(
            prog.facts.get(p) for p in stratum.preds):
        return "aggregate rules outside recursion (kept per group by their own maintainer)"
    for rule in stratum.rules:
        prep = prepare(_uncast(prog, rule))
        preds = [rule.head.pred, *(a.pred for a in prep.atoms)]
        if rule.aggregate is not None:  # kept by another maintainer (aggregate_rules)
            preds = [rule.head.pred]
        for pred in preds:
            schema = prog.schemas[pred]
            if any(c.type not in TYPES for c in schema.columns):
                return f"'{pred}' has a column that is not an int, float or string"
        if rule.aggregate is not None:
            continue
        problem = (_column_problem(prog, prep) or _constraint_problem(prog, prep)
                   or _negation_problem(prog, prep))
        if problem is not None:
            return f"rule at {rule.loc}: {problem}"
    return None


AGGREGATED = "@agg"  # an own predicate p's rows from its aggregate rules: the input p@agg


def aggregate_rules(stratum: Stratum) -> Stratum | None:
    """The aggregate rules of ``stratum`` as a non-recursive stratum of their own (None:
    there are none). Their bodies read lower strata only (recursion through an aggregate
    is DL202), so the maintainer of such a stratum keeps them, and its rows of each
    predicate p enter the columnar stratum as the input p@agg, through the rule
    p(a0, ...) :- p@agg(a0, ...)."""
    rules = tuple(r for r in stratum.rules if r.aggregate is not None)
    if not rules:
        return None
    return Stratum(tuple(sorted({r.head.pred for r in rules})), rules, recursive=False)


def _one_rule_each(stratum: Stratum) -> bool:
    """Whether every predicate of non-recursive ``stratum`` has one rule, an aggregate's
    (then, unless the program has facts of one, a maintainer of aggregate rules keeps
    the whole stratum, no bridge)."""
    heads = [r.head.pred for r in stratum.rules]
    return len(set(heads)) == len(heads) and all(r.aggregate is not None
                                                 for r in stratum.rules)


def _aggregate_outputs(stratum: Stratum) -> list[tuple[Rule, str]]:
    """Each aggregate rule of ``stratum`` and the name its rows go out under from the
    maintainer of the aggregate rules: its head p when p has no other aggregate rule,
    else p#j (the j-th of p's), so that the bridge counts a row two rules give once and
    finds a key they give two values (DL302)."""
    rules = [r for r in stratum.rules if r.aggregate is not None]
    count: dict[str, int] = {}
    for r in rules:
        count[r.head.pred] = count.get(r.head.pred, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for r in rules:
        p = r.head.pred
        j = seen[p] = seen.get(p, -1) + 1
        out.append((r, p if count[p] == 1 else f"{p}#{j}"))
    return out


def bridged_aggregates(prog: AnalyzedProgram, stratum: Stratum
                       ) -> tuple[AnalyzedProgram, Stratum] | None:
    """What the maintainer of the aggregate rules of ``stratum`` keeps (None: there are
    none): ``aggregate_rules(stratum)`` with each rule's head named as it goes out
    (``_aggregate_outputs``), and ``prog`` with the schemas of the names p#j and without
    the facts of the stratum's predicates (the bridged stratum's own rows)."""
    outputs = _aggregate_outputs(stratum)
    if not outputs:
        return None
    prog = replace(prog, facts={p: rows for p, rows in prog.facts.items()
                                if p not in stratum.preds})
    schemas = dict(prog.schemas)
    rules = []
    for rule, name in outputs:
        if name != rule.head.pred:
            schemas[name] = replace(prog.schemas[rule.head.pred], name=name)
            rule = replace(rule, head=replace(rule.head, pred=name))
        rules.append(rule)
    return (replace(prog, schemas=schemas),
            Stratum(tuple(sorted({r.head.pred for r in rules})), tuple(rules),
                    recursive=False))


def _bridged(prog: AnalyzedProgram, stratum: Stratum
             ) -> tuple[AnalyzedProgram, tuple[Rule, ...]]:
    """``prog`` with the schema of N@agg (p's) for every name N an aggregate rule of
    ``stratum`` with head p goes out under (``_aggregate_outputs``), and the stratum's
    rules with p(a0, ...) :- N@agg(a0, ...) in place of the aggregate rule (at its
    location)."""
    rules: list[Rule] = []
    schemas = dict(prog.schemas)
    bridged = {id(r): name for r, name in _aggregate_outputs(stratum)}
    for rule in stratum.rules:
        if rule.aggregate is None:
            rules.append(_uncast(prog, rule))
            continue
        pred = rule.head.pred
        name = bridged[id(rule)] + AGGREGATED
        schema = schemas[name] = prog.schemas[pred]
        args = tuple(Var(f"a{i}") for i in range(schema.arity))
        rules.append(Rule(Atom(pred, args, schema.functional),
                          (Atom(name, args, schema.functional),), loc=rule.loc))
    return replace(prog, schemas=schemas), tuple(rules)


def _uncast(prog: AnalyzedProgram, rule: Rule) -> Rule:
    """``rule`` with every variable read from columns of one type (``uncast``)."""
    return uncast(rule, lambda pred, i: prog.schemas[pred].columns[i].type)


def _column_problem(prog: AnalyzedProgram, prep: PreparedRule) -> str | None:
    """Why the columns of ``prep`` are not columnar (None: they are): a variable joins
    columns of one type (codes are per type), and goes into a head column of its type
    or, an int, into a float column."""
    types: dict[str, str] = {}
    for a in prep.atoms:
        for v, c in zip(a.vars, prog.schemas[a.pred].columns, strict=True):
            if types.setdefault(v, c.type) != c.type:
                return f"{v} joins {types[v]} and {c.type} columns"
    for v, typ in prep.rule.casts:
        if types.get(v, typ) != typ:
            return f"{v}, a {typ}, is bound by a {types[v]} column"
    var_types = _var_types(prog, prep)
    head = prep.rule.head
    for arg, col in zip(head.args, prog.schemas[head.pred].columns, strict=True):
        if isinstance(arg, Var):
            t = var_types.get(arg.name)
            if t != col.type and (t, col.type) != ("int", "float"):
                return f"{arg.name}, a {t}, goes into a {col.type} column"
    return None


def _negation_problem(prog: AnalyzedProgram, prep: PreparedRule) -> str | None:
    """Why the negations of ``prep`` are not columnar (None: they are): each variable a
    negation binds is of its column's type, or both are numbers (its key set converts
    the column's values, ``ColumnarStratum.neg_casts``)."""
    types = _var_types(prog, prep)
    numbers = ("int", "float")
    for neg in negated_atoms(prep):
        for v, t in zip(neg.key_vars, _key_types(prog, neg), strict=True):
            vt = types.get(v)
            if t not in TYPES or (vt != t and not (vt in numbers and t in numbers)):
                return f"!{neg.atom.pred}(...): {v} is a {vt} in a column of type {t}"
    return None


def _key_types(prog: AnalyzedProgram, neg: NegatedAtom) -> tuple[str, ...]:
    """The column type of each key variable of ``neg`` (where it first occurs)."""
    cols = prog.schemas[neg.atom.pred].columns
    first: dict[str, str] = {}
    for arg, col in zip(neg.atom.args, cols, strict=True):
        if isinstance(arg, Var):
            first.setdefault(arg.name, col.type)
    return tuple(first[v] for v in neg.key_vars)


def _neg_signature(neg: NegatedAtom) -> tuple[Any, ...]:
    """What a negation's key set depends on: two negations alike share one."""
    return (neg.atom.pred, *(
        ("c", a.value) if isinstance(a, Const) else
        ("v", neg.key_vars.index(a.name)) if a.name in neg.key_vars else ("_",)
        for a in neg.atom.args))


def _expr_type(e: Expr, types: Mapping[str, str]) -> str | None:
    if isinstance(e, Var):
        return types.get(e.name)
    if isinstance(e, Const):
        return "string" if isinstance(e.value, str) else (
            "float" if isinstance(e.value, float) else "int")
    left, right = _expr_type(e.left, types), _expr_type(e.right, types)
    if left is None or right is None:
        return None
    if left not in ("int", "float") or right not in ("int", "float"):
        return "other"
    return "int" if left == right == "int" else "float"


def _var_types(prog: AnalyzedProgram, prep: PreparedRule) -> dict[str, str]:
    """The column type of every variable of the rule (atoms first, then the analysis'
    type of a variable an assignment converts, ``Rule.casts``, then assignments)."""
    types: dict[str, str] = {}
    for a in prep.atoms:
        for v, c in zip(a.vars, prog.schemas[a.pred].columns, strict=True):
            types[v] = c.type
    for v, typ in prep.rule.casts:
        types.setdefault(v, typ)
    changed = True
    while changed:
        changed = False
        for v, e in (*prep.assigns, *compare_assignments(prep)):
            t = _expr_type(e, types)
            if v not in types and t is not None:
                types[v] = t
                changed = True
    return types


def _constraint_problem(prog: AnalyzedProgram, prep: PreparedRule) -> str | None:
    """Why the comparisons and assignments of ``prep`` are not columnar (None: they are)."""
    types = _var_types(prog, prep)
    sides: list[tuple[str, Expr, Expr]] = [("=", Var(v), e) for v, e in prep.assigns]
    sides += [(c.op, c.left, c.right) for c in prep.filters]
    for op, left, right in sides:
        lt, rt = _expr_type(left, types), _expr_type(right, types)
        if lt not in TYPES or rt not in TYPES or (lt == "string") != (rt == "string"):
            return f"{left} {op} {right}: arithmetic and comparisons of numbers, " \
                "comparisons of strings"
        if lt == "string" and not all(isinstance(x, Var | Const) for x in (left, right)):
            return f"{left} {op} {right}: strings are compared, not computed"
    return None


# ---------------------------------------------------------------------------------------
# Encoding and packing.


# A dictionary of fewer values than this is saved inline with the state, not in segments.
CODES_MIN = 4096
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_COLUMN_TYPES = (int, float, str)  # the values a dictionary in segments may hold


def _i64(v: Any) -> int | None:
    """The int64 equal to ``v`` (an int, or a float with an integral value), if any."""
    if type(v) is float and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and _I64_MIN <= v <= _I64_MAX else None


def _key(v: Any) -> bytes | None:
    """What a level of rows finds ``v`` by: the same bytes for values a dict takes as the
    same key (1 and 1.0), none for NaN (a dict finds it only as the object it
    holds, which a state read back is not) or a value of no column type."""
    if type(v) is str:
        return b"s" + v.encode()
    if type(v) is float:
        if not v.is_integer():
            return None if v != v else b"f" + struct.pack(">d", v)
        v = int(v)
    if not isinstance(v, int):
        return None
    return b"i" + v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True)


def _packed(v: Any) -> Any:
    """``v`` as a sorted run holds it: an int beyond int64 as its bytes (beyond what
    MessagePack holds; a value of a column type is never bytes)."""
    if type(v) is int and not _I64_MIN <= v <= _I64_MAX:
        return v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True)
    return v


def _unpacked(v: Any) -> Any:
    return int.from_bytes(v, "big", signed=True) if type(v) is bytes else v


def _ints(values: Sequence[Any]) -> tuple[I64, Bool]:
    """Ints as int64, and which are beyond int64 (0 there)."""
    big = [not _I64_MIN <= v <= _I64_MAX for v in values]
    return (np.array([0 if b else v for v, b in zip(values, big, strict=True)], np.int64),
            np.array(big, np.bool_))


class _IntLevel:
    """A level of int64 values: the values by code and the codes in value order, two
    arrays mapped from the store (a value is an index, a lookup a binary search through
    ``order``)."""

    kind = "int"

    def __init__(self, values: I64, order: I64):
        if len(order) != len(values):
            raise CorruptSegment("a level of codes whose two arrays differ in length")
        self.values, self.order = values, order
        self.n = len(values)

    @staticmethod
    def write(sink: SegmentSink, values: Sequence[Any]) -> list[Any]:
        arr = np.array(values, np.int64)
        return [sink.array(arr), sink.array(np.argsort(arr, kind="stable"))]

    @classmethod
    def open(cls, source: SegmentSource, ref: Any) -> "_IntLevel":
        return cls(source.open_array(ref[0]), source.open_array(ref[1]))

    def persist(self, sink: SegmentSink) -> list[Any]:
        """The level in the new state (the arrays never change: kept, nothing written)."""
        return [sink.array(self.values), sink.array(self.order)]

    def find(self, values: Sequence[Any]) -> I64:
        """The code of each of ``values`` in the level (-1: not there)."""
        out = np.full(len(values), -1, np.int64)
        q = [_i64(v) for v in values]
        at = np.array([i for i, x in enumerate(q) if x is not None], np.int64)
        if len(at):
            keys = np.array([q[i] for i in at.tolist()], np.int64)
            pos = np.searchsorted(self.values, keys, sorter=self.order)
            code = self.order[np.minimum(pos, self.n - 1)]
            hit = self.values[code] == keys
            out[at[hit]] = code[hit]
        return out

    def get(self, codes: I64) -> list[Any]:
        return self.values[codes].tolist()  # type: ignore[no-any-return]

    def ints(self, codes: I64) -> tuple[I64, Bool]:
        return self.values[codes], np.zeros(len(codes), np.bool_)

    def all(self) -> list[Any]:
        return self.values.tolist()  # type: ignore[no-any-return]


class _RowLevel:
    """A level of any values (strings, floats, ints beyond int64): two sorted runs
    (``deltalog.engine.segments``), of (code, value) and of (``_key``, code), read a page at a
    time."""

    kind = "rows"

    def __init__(self, names: list[str], by_code: SortedRun, by_key: SortedRun):
        self.names, self.by_code, self.by_key = names, by_code, by_key
        self.n = by_code.n

    @staticmethod
    def write(sink: SegmentSink, values: Sequence[Any]) -> list[str]:
        keyed: list[Any] = sorted(
            (k, i) for i, v in enumerate(values) if (k := _key(v)) is not None)
        return [write_run(sink, ((i, _packed(v)) for i, v in enumerate(values))),
                write_run(sink, keyed)]

    @classmethod
    def open(cls, source: SegmentSource, ref: Any) -> "_RowLevel":
        by_code, by_key = ref
        return cls([by_code, by_key], SortedRun(source.read(by_code)),
                   SortedRun(source.read(by_key)))

    def persist(self, sink: SegmentSink) -> list[str]:
        sink.keep(self.names)
        return self.names

    def find(self, values: Sequence[Any]) -> I64:
        out = np.full(len(values), -1, np.int64)
        for i, v in enumerate(values):
            k = _key(v)
            row = self.by_key.ceil((k,)) if k is not None else None
            if row is not None and row[0] == k:
                out[i] = row[1]
        return out

    def get(self, codes: I64) -> list[Any]:
        out = []
        for i in codes.tolist():
            row = self.by_code.ceil((i,))
            if row is None or row[0] != i:
                raise CorruptSegment(f"code {i} is not in its level")
            out.append(_unpacked(row[1]))
        return out

    def ints(self, codes: I64) -> tuple[I64, Bool]:
        return _ints(self.get(codes))

    def all(self) -> list[Any]:
        return [_unpacked(v) for _, v in self.by_code]


_LEVELS: dict[str, type[_IntLevel] | type[_RowLevel]] = {
    _IntLevel.kind: _IntLevel, _RowLevel.kind: _RowLevel}


class _Codes:
    """Values of one column type and their codes: 0, 1, ... in the order the values are
    first seen, below 2^31; a value's code never changes.

    Made in memory: a dict (value -> code) and a list (code -> value). In a segment store
    (``__persist__``; below ``CODES_MIN`` values the dictionary is saved inline, by
    ``__getstate__``) it is a list of *levels*, oldest first, each the values of a range
    of codes, written once and never changed: for int64 values two arrays (the values by
    code; the codes in value order), for any others two sorted runs ((code, value);
    (key, code), one key for the values a dict takes as one, ``_key``). Opening maps the
    levels and decodes nothing; a value is looked up in the dict, then in the levels (a
    binary search in each, vectorized over int64 levels; what is found joins the dict),
    and one found nowhere gets the next code (dict and list, as in memory); a code is
    decoded from its level (an array index, or a page of a run).

    A save keeps the levels and writes the values coded since the open as a new level,
    merged with the last levels (their values read back) while the last holds at most
    twice as many values as those after it: so each level holds more than twice the next,
    there are O(log n) levels, and a value is rewritten O(log n) times (its level grows by
    half at each merge). A save writes O(log n) bytes per new value, amortized, and
    nothing when there is none, where the whole dictionary was written before; the oldest
    level is rewritten once the values after it pass half of it. (One base and a chain of
    deltas would decode the chain at open, or rewrite the base every so many saves.)
    """

    def __init__(self) -> None:
        self._open([])

    def _open(self, levels: list[_IntLevel | _RowLevel]) -> None:
        self._levels = levels
        # the first code of each level, then of the values in memory
        self._starts: I64 = np.cumsum([0, *(lv.n for lv in levels)], dtype=np.int64)
        self._base = int(self._starts[-1])
        self._ids: dict[Any, int] = {}  # value -> code: new values, and those looked up
        self._new: list[Any] = []  # the values of codes _base, _base + 1, ...
        self._mirror: I64 = _E64  # ints: the values of the first len(mirror) new codes
        self._big: Bool = np.zeros(0, np.bool_)  # ... and which are beyond int64
        self._fmirror: F64 = np.zeros(0, np.float64)  # floats: the same

    def encode(self, values: Sequence[Any]) -> I64:
        if self._levels:
            self._look_up(values)
        ids, vals, base = self._ids, self._new, self._base
        out = np.empty(len(values), np.int64)
        for i, v in enumerate(values):
            k = ids.get(v)
            if k is None:
                k = ids[v] = base + len(vals)
                if k >= 2**31 - 1:
                    raise OverflowError("more than 2^31 distinct values in one column type")
                vals.append(v)
            out[i] = k
        return out

    def encode_distinct(self, values: list[Any]) -> I64:
        """``encode`` of distinct values, the dict probed and filled by whole lists."""
        if self._levels:
            self._look_up(values)
        ids = self._ids
        got = list(map(ids.get, values))
        missing = [v for v, k in zip(values, got, strict=True) if k is None]
        if missing:
            base = self._base + len(self._new)
            if base + len(missing) >= 2**31 - 1:
                raise OverflowError("more than 2^31 distinct values in one column type")
            ids.update(zip(missing, range(base, base + len(missing)), strict=True))
            self._new.extend(missing)
            got = list(map(ids.get, values))
        return np.array(got, np.int64)

    def find(self, values: Sequence[Any]) -> I64:
        """The codes of ``values``, -1 for a value never coded (nothing is coded here)."""
        if self._levels:
            self._look_up(values)
        ids = self._ids
        return np.fromiter((ids.get(v, -1) for v in values), np.int64, len(values))

    def _look_up(self, values: Sequence[Any]) -> None:
        """Those of ``values`` the levels hold go into the dict."""
        ids = self._ids
        todo = [v for v in values if v not in ids]
        for level, start in zip(self._levels, self._starts.tolist(), strict=False):
            if not todo:
                break
            found = level.find(todo).tolist()
            for v, k in zip(todo, found, strict=True):
                if k >= 0:
                    ids[v] = start + k
            todo = [v for v, k in zip(todo, found, strict=True) if k < 0]

    def _parts(self, ids: I64) -> list[tuple[int, I64, I64]]:
        """``ids`` by where their values are: (level, or len(levels) for the values in
        memory; positions in ids; codes from the part's first)."""
        where = np.searchsorted(self._starts, ids, side="right") - 1
        out = []
        for j in np.flatnonzero(np.bincount(where)).tolist():
            at = np.flatnonzero(where == j)
            out.append((j, at, ids[at] - self._starts[j]))
        return out

    def decode(self, ids: I64) -> list[Any]:
        vals = self._new
        if not self._levels:
            if len(ids) > 4 * len(vals):  # many: one gather through an object array
                table = np.fromiter(vals, dtype=object, count=len(vals))
                return table[ids].tolist()  # type: ignore[no-any-return]
            return [vals[i] for i in ids.tolist()]
        out: list[Any] = [None] * len(ids)
        for j, at, codes in self._parts(ids):
            got = (self._levels[j].get(codes) if j < len(self._levels)
                   else [vals[i] for i in codes.tolist()])
            for i, v in zip(at.tolist(), got, strict=True):
                out[i] = v
        return out

    def encode_array(self, values: Num) -> I64:
        """Codes of int64 or float64 values (one dictionary probe per distinct value)."""
        if values.dtype.kind == "i" and len(values) >= ARRAY_ROWS:
            lo, hi = int(values.min()), int(values.max())
            if hi - lo < 4 * len(values):  # dense ints (ids): a table, no sort
                rel = values - lo
                uniq = np.flatnonzero(np.bincount(rel, minlength=hi - lo + 1))
                table = np.empty(hi - lo + 1, np.int64)
                table[uniq] = self.encode_distinct((uniq + lo).tolist())
                return table[rel]
        uniq, inverse = np.unique(values, return_inverse=True)
        return self.encode_distinct(uniq.tolist())[inverse.reshape(-1)]

    def ints(self, ids: I64) -> tuple[I64, Bool]:
        """The values of int codes as int64, and which are beyond int64 (0 there)."""
        if len(self._mirror) < len(self._new):
            fresh, big = _ints(self._new[len(self._mirror):])
            self._mirror = np.concatenate([self._mirror, fresh])
            self._big = np.concatenate([self._big, big])
        if not self._levels:
            return self._mirror[ids], self._big[ids]
        vals, big = np.zeros(len(ids), np.int64), np.zeros(len(ids), np.bool_)
        for j, at, codes in self._parts(ids):
            vals[at], big[at] = (self._levels[j].ints(codes) if j < len(self._levels)
                                 else (self._mirror[codes], self._big[codes]))
        return vals, big

    def floats(self, ids: I64) -> F64:
        """The values of float codes as float64."""
        if len(self._fmirror) < len(self._new):
            fresh = np.array(self._new[len(self._fmirror):], np.float64)
            self._fmirror = np.concatenate([self._fmirror, fresh])
        if not self._levels:
            return self._fmirror[ids]
        out = np.empty(len(ids), np.float64)
        for j, at, codes in self._parts(ids):
            out[at] = (np.array(self._levels[j].get(codes), np.float64)
                       if j < len(self._levels) else self._fmirror[codes])
        return out

    def _values(self) -> list[Any]:
        return [v for level in self._levels for v in level.all()] + self._new

    def __getstate__(self) -> dict[str, Any]:
        if not self._levels:
            return {"ids": self._ids, "values": self._new}  # the mirror is made again
        values = self._values()
        return {"ids": {v: i for i, v in enumerate(values)}, "values": values}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._open([])
        self._ids, self._new = state["ids"], state["values"]

    def __persist__(self, sink: SegmentSink) -> list[Any] | None:
        """The levels in a segment store (see the class); None (saved inline) below
        ``CODES_MIN`` values or with a value of no column type."""
        new = self._new
        if self._base + len(new) < CODES_MIN or any(type(v) not in _COLUMN_TYPES
                                                     for v in new):
            return None
        levels, k, merged = self._levels, len(self._levels), len(new)
        while merged and k and levels[k - 1].n <= 2 * merged:
            k -= 1
            merged += levels[k].n
        refs = [[level.kind, level.persist(sink)] for level in levels[:k]]
        if merged:
            values = [v for level in levels[k:] for v in level.all()] + new
            cls = _IntLevel if all(type(v) is int and _I64_MIN <= v <= _I64_MAX
                                   for v in values) else _RowLevel
            refs.append([cls.kind, cls.write(sink, values)])
        return refs

    @classmethod
    def __restore__(cls, source: SegmentSource, ref: Any) -> "_Codes":
        codes = cls()
        levels: list[_IntLevel | _RowLevel] = []
        for kind, level in ref:
            if kind not in _LEVELS:
                raise CorruptSegment(f"a level of codes of unknown kind {kind!r}")
            levels.append(_LEVELS[kind].open(source, level))
        codes._open(levels)
        return codes


def _swap(keys: I64) -> I64:
    return ((keys & LOW) << 32) | (keys >> 32)


def _ranges(lo: I64, hi: I64) -> tuple[I64, I64]:
    """(owner, index): every index of [lo[i], hi[i]) with its i."""
    lens = hi - lo
    total = int(lens.sum())
    if not total:
        return _E64, _E64
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), lens)
    start = np.repeat(lo - (np.cumsum(lens) - lens), lens)
    return owner, np.arange(total, dtype=np.int64) + start


def _positions(sorted_keys: I64, keys: I64) -> I64:
    """Where ``keys`` go in ``sorted_keys``, as ``np.searchsorted`` answers, by a compiled
    galloping search (``kernels.gallop``): a linear merge for sorted keys when both are
    large, a binary search each when the keys are few."""
    out = np.empty(len(keys), np.int64)
    kernels.gallop(sorted_keys, np.ascontiguousarray(keys), out)
    return out


def _find(sorted_keys: I64, keys: I64) -> tuple[I64, Bool]:
    """Positions of ``keys`` in ``sorted_keys`` and whether each is there."""
    pos = _positions(sorted_keys, keys)
    if not len(sorted_keys):
        return pos, np.zeros(len(keys), np.bool_)
    hit = sorted_keys[np.minimum(pos, len(sorted_keys) - 1)] == keys
    hit &= pos < len(sorted_keys)
    return pos, hit


def _sum_by_key(keys: I64, w: I64) -> tuple[I64, I64]:
    """A Z-set from (key, weight) pairs: distinct sorted keys, summed weights, no zeros."""
    if len(keys) <= 4 * SMALL:
        return kernels.sum_by_key(keys, w)  # type: ignore[no-any-return]
    ones = bool((w == 1).all())  # (counting: a plain sort, several times faster)
    order = None if ones else np.argsort(keys)
    k = np.sort(keys) if order is None else keys[order]
    first = np.ones(len(k), np.bool_)
    np.not_equal(k[1:], k[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    if order is None:
        return k[starts], np.diff(np.append(starts, len(k)))
    sums = np.add.reduceat(w[order], starts)
    k = k[starts]
    nz = sums != 0
    return k[nz], sums[nz]


class _Hash:
    """Packed keys to ids: open addressing with linear probing, at most half full (a
    probe is one random access, where a binary search among millions of keys is a
    dozen)."""

    def __init__(self, keys: I64, ids: I64):
        self._build(keys, ids)

    def _build(self, keys: I64, ids: I64, room: int = 0) -> None:
        """The table of ``keys``, sized for ``room`` more."""
        self.bits = max(10, int(2 * (len(keys) + room) + 1).bit_length())
        self.n = 0
        self.tk = np.full(1 << self.bits, -1, np.int64)  # packed keys are never negative
        self.tv = np.zeros(1 << self.bits, np.int64)
        self.insert(keys, ids)

    def insert(self, keys: I64, ids: I64) -> None:
        """Add keys that are not there (distinct), with their ids."""
        if 2 * (self.n + len(keys)) > len(self.tk):
            held = self.tk >= 0
            self._build(np.concatenate([self.tk[held], keys]),
                        np.concatenate([self.tv[held], ids]))
            return
        self.n += len(keys)
        kernels.hash_insert(self.tk, self.tv, self.bits, np.ascontiguousarray(keys),
                            np.ascontiguousarray(ids, dtype=np.int64))

    def reserve(self, n: int) -> None:
        """Room for n more keys (at most half full with them): rebuilt larger when not."""
        if 2 * (self.n + n) > len(self.tk):
            held = self.tk >= 0
            self._build(self.tk[held], self.tv[held], n)

    def get(self, keys: I64) -> I64:
        """The ids of ``keys`` (-1: not there)."""
        out = np.empty(len(keys), np.int64)
        kernels.hash_get(self.tk, self.tv, self.bits, np.ascontiguousarray(keys), out)
        return out


# A layout of a relation's rows as packed keys: the columns packed in the high 32 bits (a
# prefix a lookup binds) and those in the low 32 bits, each group one code (one column:
# its code; more: nested pairs of ``_Packing``). A relation's natural layout (its facts'
# keys) is its first column, then the rest.
Layout = tuple[tuple[int, ...], tuple[int, ...]]
SWAPPED: Layout = ((1,), (0,))


def natural(arity: int) -> Layout:
    return ((), ()) if not arity else ((0,), tuple(range(1, arity)))


class _Packing:
    """Codes of pairs of codes, so that any group of columns is one code below 2^31 and
    a row of any arity packs into one int64 in any layout: (c1, c2, c3) as the pair
    (c1, (c2, c3)). Pair ids are dense, in the order pairs are first seen, shared by the
    stratum's relations, never dropped (like the values' codes)."""

    def __init__(self) -> None:
        self.first, self.second = _E64, _E64
        self.n = 0
        self.index: _Hash | None = None  # (made with the first pair: most strata have none)

    def _pair(self, a: I64, b: I64) -> I64:
        """The ids of pairs (a[i], b[i]), new ones given ids."""
        packed = (a << 32) | b
        if self.index is None:
            self.index = _Hash(_E64, _E64)
        ids = self.index.get(packed)
        new = ids < 0
        if new.any():
            fresh = _distinct(packed[new])
            n0, n1 = self.n, self.n + len(fresh)
            if n1 >= 2**31:
                raise ValueError("not supported: more than 2^31 distinct pairs of values "
                                 "in the rows of one recursive stratum")
            self.first, self.second = _grown(self.first, n1, 0), _grown(self.second, n1, 0)
            self.first[n0:n1], self.second[n0:n1] = fresh >> 32, fresh & LOW
            self.index.insert(fresh, np.arange(n0, n1, dtype=np.int64))
            self.n = n1
            ids[new] = self.index.get(packed[new])
        return ids

    def _known(self, a: I64, b: I64) -> I64:
        """The ids of pairs (a[i], b[i]); -1 where the pair was never seen (or a part is
        -1)."""
        out = np.full(len(a), -1, np.int64)
        if self.index is not None:
            index = self.index
            kernels.pair_get(index.tk, index.tv, index.bits, np.ascontiguousarray(a),
                             np.ascontiguousarray(b), out)
        return out

    def group(self, cols: Sequence[I64], n: int, known: bool = False) -> I64:
        """One code per row for the columns ``cols`` (n rows); with ``known``, -1 where
        the rows' pairs were never seen (values looked up, not rows added)."""
        if not cols:
            return np.zeros(n, np.int64)
        out = cols[-1]
        for c in reversed(cols[:-1]):
            out = self._known(c, out) if known else self._pair(c, out)
        return out

    def ungroup(self, codes: I64, width: int) -> list[I64]:
        """The ``width`` columns of group codes."""
        out: list[I64] = []
        for _ in range(width - 1):
            out.append(self.first[codes])
            codes = self.second[codes]
        if width:
            out.append(codes)
        return out

    def pack(self, layout: Layout, cols: Sequence[I64], n: int, known: bool = False) -> I64:
        """Keys in ``layout`` of rows given by column (``cols[i]``: column i's codes); with
        ``known``, a negative key (found nowhere) where a pair was never seen."""
        high, low = layout
        if len(high) == 1 and len(low) == 1:  # (most layouts: two columns)
            return (cols[high[0]] << 32) | cols[low[0]]
        head = self.group([cols[i] for i in high], n, known) << 32
        if not layout[1]:
            return head
        return head | self.group([cols[i] for i in layout[1]], n, known)

    def unpack(self, layout: Layout, keys: I64) -> list[I64]:
        """The columns (by position) of keys in ``layout``."""
        high, low = layout
        if len(high) == 1 and len(low) == 1:  # (most layouts: two columns)
            return [keys >> 32, keys & LOW] if high[0] == 0 else [keys & LOW, keys >> 32]
        out = [_E64] * (len(layout[0]) + len(layout[1]))
        for part, codes in ((layout[0], keys >> 32), (layout[1], keys & LOW)):
            for i, c in zip(part, self.ungroup(codes, len(part)), strict=True):
                out[i] = c
        return out

    def relayout(self, keys: I64, src: Layout, dst: Layout) -> I64:
        """Keys in ``src`` as keys in ``dst`` (unsorted)."""
        if src == dst:
            return keys
        if (src, dst) in ((natural(2), SWAPPED), (SWAPPED, natural(2))):
            return _swap(keys)
        return self.pack(dst, self.unpack(src, keys), len(keys))


# Rows of int columns at least this many are coded through one numpy array.
ARRAY_ROWS = 4096


class _RowCoding:
    """Rows of one relation (or key set) of a stratum as natural keys, through the
    stratum's codes and pairs (``deltalog.engine.storage.RowCoding``: what the store's
    ``CodedRows`` of the stratum's relations decode with). ``layout``: the keys' layout,
    natural unless given (a functional head's support keys its key columns' group in the
    high half)."""

    def __init__(self, types: tuple[str, ...], codes: Mapping[str, _Codes], packing: _Packing,
                 layout: Layout | None = None):
        self.types, self.codes, self.packing = types, codes, packing
        self.layout = natural(len(types)) if layout is None else layout

    def encode(self, rows: Sequence[Row]) -> I64:
        arity = len(self.types)
        if len(rows) >= ARRAY_ROWS and arity and all(t == "int" for t in self.types):
            try:  # (a load's int rows: one array, coded one distinct value at a time)
                table = int_table(rows, arity)
            except OverflowError:  # an int beyond 64 bits: one value at a time
                pass
            else:
                return self.encode_columns(list(table.T))
        cols = [self.codes[t].encode([r[i] for r in rows]) for i, t in enumerate(self.types)]
        return self.packing.pack(self.layout, cols, len(rows))

    def encode_columns(self, columns: Sequence[Column]) -> I64:
        """The keys of rows given by column (numpy arrays: int64 and float64 ones coded
        one distinct value at a time; a ``Dictionary``: its values, then gathered)."""
        cols = [self._column(t, col) for t, col in zip(self.types, columns, strict=True)]
        return self.packing.pack(self.layout, cols, len(cols[0]) if cols else 0)

    def _column(self, t: str, col: Column) -> I64:
        if isinstance(col, Dictionary):
            return self._column(t, col.values)[np.asarray(col.indices, np.int64)]
        if not isinstance(col, np.ndarray):  # (a list: its values as they are, not numpy's
            # fixed-width text, which drops a string's trailing NULs; ints as one int64
            # array when all fit)
            ints = np.array(col) if t == "int" else None
            col = ints if ints is not None and ints.dtype.kind == "i" else np.asarray(
                col, dtype=np.float64 if t == "float" else object)
        if t == "float":  # (an int filling a float column is the float; -0.0 is 0.0)
            return self.codes[t].encode_array(np.asarray(col, np.float64) + 0.0)
        if t == "int" and col.dtype.kind == "i":
            return self.codes[t].encode_array(col)
        # strings, and ints beyond 64 bits (objects)
        return self.codes[t].encode(col.tolist())

    def find(self, rows: Sequence[Row]) -> I64:
        cols = [self.codes[t].find([r[i] for r in rows]) for i, t in enumerate(self.types)]
        keys = self.packing.pack(self.layout, cols, len(rows), known=True)
        keys[keys < 0] = -1  # (a code -1, or a pair never seen, packs negative)
        return keys

    def decode(self, keys: I64) -> list[Row]:
        if not self.types:
            return [()] * len(keys)
        codes = self.packing.unpack(self.layout, keys)
        values = [self.codes[t].decode(k) for t, k in zip(self.types, codes, strict=True)]
        return list(zip(*values, strict=True))

    def columns(self, keys: I64) -> list[NDArray[Any]]:
        out: list[NDArray[Any]] = []
        for t, k in zip(self.types, self.packing.unpack(self.layout, keys), strict=True):
            if t == "float":
                out.append(self.codes[t].floats(k))
                continue
            if t == "int":
                values, big = self.codes[t].ints(k)
                if not big.any():
                    out.append(values)
                    continue
            col = np.empty(len(k), dtype=object)
            col[:] = self.codes[t].decode(k)
            out.append(col)
        return out


@dataclass
class SharedCoding:
    """The codes (one dictionary per column type) and the pair packing that an engine's
    columnar strata and its inputs loaded by column share: a stratum reads the keys of
    such an input, or of a lower columnar stratum's relation, as they are (no recoding),
    and a value is in one dictionary, not one per stratum."""

    codes: dict[str, "_Codes"] = field(default_factory=lambda: {t: _Codes() for t in TYPES})
    packing: "_Packing" = field(default_factory=lambda: _Packing())


def coded_columns(types: Sequence[str], columns: Sequence[Column],
                  coding: SharedCoding | None = None) -> CodedRows:
    """The set of rows given by column (an input loaded as columns) as coded rows, in
    ``coding`` (default: one of their own): values coded one distinct value at a time, no
    Python row made. Types: int, float, string."""
    shared = coding if coding is not None else SharedCoding()
    rows = _RowCoding(tuple(types), shared.codes, shared.packing)
    return CodedRows(_distinct(rows.encode_columns(columns)), rows)


# ---------------------------------------------------------------------------------------
# Versions of one relation in one column order.


@dataclass
class _View:
    """Rows of a relation in one layout (packed keys): the rows of the base parts
    (sorted keys with the ids of their facts; ids None: the positions) whose depth
    (``depth[id]``) is in [lo, hi] (every row when ``depth`` is None), except keys the
    patch holds, which are there when their patch depth is in [lo, hi] (the patch: an
    input's change, for its new version)."""

    parts: list[tuple[I64, I64 | None]]
    depth: I32 | None
    pkeys: I64 = field(default_factory=lambda: _E64)
    pdepth: I32 = field(default_factory=lambda: _E32)
    lo: int = 0
    hi: int = 0
    hash: "_Hash | None" = None  # ids of every key of the parts (the natural layout)

    def _ok(self, d: I32) -> Bool:
        return (d >= self.lo) & (d <= self.hi)

    def _keep(self, ids: I64 | None, idx: I64) -> Bool | None:
        if self.depth is None:
            return None
        return self._ok(self.depth[ids[idx] if ids is not None else idx])

    def counts(self, first: I64) -> I64:
        """Upper bounds of how many rows have each code of ``first`` as their high half."""
        a, b = first << 32, (first + 1) << 32
        n = np.zeros(len(first), np.int64)
        for keys in [k for k, _ in self.parts] + [self.pkeys]:
            if len(keys):
                n += _positions(keys, b) - _positions(keys, a)
        return n

    def expand(self, first: I64) -> tuple[I64, I64, int]:
        """(owner, second, candidates): every row (first[i], second) of the view (the
        codes of its high and low halves)."""
        if len(first) <= SMALL and len(self.parts) <= 3:  # one compiled call
            (k0, i0), (k1, i1), (k2, i2) = [*self.parts, *[(_E64, None)] * 3][:3]
            owner, second, seen = kernels.view_expand(
                first, k0, _E64 if i0 is None else i0, k1, _E64 if i1 is None else i1,
                k2, _E64 if i2 is None else i2, _E32 if self.depth is None else self.depth,
                self.lo, self.hi, self.pkeys, self.pdepth)
            return owner, second, int(seen)
        a, b = first << 32, (first + 1) << 32
        owners: list[I64] = []
        found: list[I64] = []
        seen = 0
        for keys, ids in self.parts:
            if not len(keys):
                continue
            starts, ends = _positions(keys, a), _positions(keys, b)
            if not len(self.pkeys):  # one compiled pass: range, depth check, second column
                total = int((ends - starts).sum())
                seen += total
                owner, second = np.empty(total, np.int64), np.empty(total, np.int64)
                got = kernels.expand(keys, _E64 if ids is None else ids,
                                     _E32 if self.depth is None else self.depth,
                                     self.lo, self.hi, starts, ends, owner, second)
                owners.append(owner[:got])
                found.append(second[:got])
                continue
            owner, idx = _ranges(starts, ends)
            k = keys[idx]
            seen += len(k)
            keep = self._keep(ids, idx)
            if len(self.pkeys):
                _, shadowed = _find(self.pkeys, k)
                keep = ~shadowed if keep is None else keep & ~shadowed
            if keep is not None:
                owner, k = owner[keep], k[keep]
            owners.append(owner)
            found.append(k & LOW)
        if len(self.pkeys):
            pown, pidx = _ranges(_positions(self.pkeys, a), _positions(self.pkeys, b))
            seen += len(pidx)
            pkeep = self._ok(self.pdepth[pidx])
            owners.append(pown[pkeep])
            found.append(self.pkeys[pidx][pkeep] & LOW)
        if not owners:
            return _E64, _E64, 0
        return np.concatenate(owners), np.concatenate(found), seen

    def contains(self, keys: I64) -> Bool:
        if self.hash is not None and self.depth is not None and not len(self.pkeys):
            found = self.hash.get(keys)
            out = found >= 0
            out[out] = self._ok(self.depth[found[out]])
            return out
        out = np.zeros(len(keys), np.bool_)
        for part, ids in self.parts:
            pos, hit = _find(part, keys)
            keep = self._keep(ids, pos[hit])
            if keep is not None:
                hit[hit] = keep
            out |= hit
        if len(self.pkeys):
            ppos, phit = _find(self.pkeys, keys)
            out[phit] = self._ok(self.pdepth[ppos[phit]])
        return out

    def firsts(self) -> I64:
        """The distinct codes of the view's rows' high halves."""
        found: list[I64] = []
        for keys, ids in self.parts:
            keep = self._keep(ids, np.arange(len(keys), dtype=np.int64))
            k = keys if keep is None else keys[keep]
            if len(self.pkeys):
                _, shadowed = _find(self.pkeys, k)
                k = k[~shadowed]
            found.append(k)
        found.append(self.pkeys[self._ok(self.pdepth)])
        return _distinct(np.concatenate(found) >> 32)


def _empty_view() -> _View:
    return _View([], None)


# ---------------------------------------------------------------------------------------
# Rules.


UNIT = -1  # the factor of a rule with no positive atom, in initialize: one empty row


class _CRule:
    # (a state saved before ``pairs``: every query takes the generic steps)
    pairs: Mapping[int, tuple[PlanAtom, tuple[int, ...], int]] = MappingProxyType({})

    def __init__(self, prog: AnalyzedProgram, prep: PreparedRule, own: frozenset[str],
                 codes: dict[str, _Codes]):
        rule = prep.rule
        self.prep = prep
        self.pred = rule.head.pred
        self.atoms: tuple[PlanAtom, ...] = prep.atoms
        self.own_atoms = [a.index for a in prep.atoms if a.pred in own]
        cols = prog.schemas[self.pred].columns
        self.types = _var_types(prog, prep)
        self.head: list[str | int] = []  # a variable, or the id of a constant
        self.casts: list[int] = []  # head columns of floats that an int variable fills
        for i, (arg, col) in enumerate(zip(rule.head.args, cols, strict=True)):
            if isinstance(arg, Var):
                self.head.append(arg.name)
                if self.types[arg.name] != col.type:
                    self.casts.append(i)
            else:
                assert isinstance(arg, Const)
                self.head.append(int(codes[col.type].encode([coerce(arg.value, col.type)])[0]))
        self.orders = {a.index: seeded_order(prep, a.vars) for a in prep.atoms}
        self.orders[UNIT] = seeded_order(prep, ())
        # negations: factor len(atoms) + k of the body reads the key set ``neg_names[k]``
        # (an input of the stratum, named by ``ColumnarStratum``), as 1 - N'
        self.negs = negated_atoms(prep)
        self.neg_names: list[str] = []
        for neg in self.negs:
            self.orders[len(self.atoms) + neg.index] = seeded_order(prep, neg.key_vars)
        # comparisons and assignments as (left, op, right): an ``=`` with a variable on one
        # side binds it when the other side is bound first, and is a check otherwise
        self.constraints: list[tuple[Expr, str, Expr]] = [
            (Var(v), "=", e) for v, e in prep.assigns]
        self.constraints += [(c.left, c.op, c.right) for c in prep.filters]
        # (``ColumnarStratum._join``) a body of two atoms and nothing else, where the
        # seed's row binds every variable of the other atom but one: by seed factor, the
        # other atom, its bound columns and its free one
        pairs: dict[int, tuple[PlanAtom, tuple[int, ...], int]] = {}
        if len(self.atoms) == 2 and not self.negs and not self.constraints:
            for p, other in ((0, self.atoms[1]), (1, self.atoms[0])):
                free = [i for i, v in enumerate(other.vars) if v not in self.atoms[p].vars]
                if len(free) == 1 and len(other.vars) > 1:
                    pairs[p] = (other, tuple(i for i in range(len(other.vars))
                                             if i != free[0]), free[0])
        self.pairs = pairs

    def project(self, cols: Mapping[str, I64], n: int, cast: Callable[[I64], I64],
                packing: _Packing) -> I64:
        """Head keys; ``cast(codes)`` recodes an int variable's codes as floats."""
        parts = [(cols[h] if i not in self.casts else cast(cols[h])) if isinstance(h, str)
                 else np.full(n, h, np.int64) for i, h in enumerate(self.head)]
        return packing.pack(natural(len(parts)), parts, n)


# A source: for an atom, its view in a layout.
Source = Any  # Callable[[Layout], _View]


def _grown(arr: NDArray[Any], n: int, fill: Any) -> NDArray[Any]:
    """``arr`` with room for at least n entries (1.5x growth; new entries ``fill``)."""
    if n <= len(arr):
        return arr
    out = np.full(max(n, len(arr) * 3 // 2 + 1024), fill, arr.dtype)
    out[: len(arr)] = arr
    return out


def _sized(arr: NDArray[Any], cap: int, fill: Any) -> NDArray[Any]:
    """``arr`` in an array of ``cap`` entries (the rest ``fill``)."""
    out = np.empty(cap, arr.dtype)
    out[: len(arr)] = arr
    out[len(arr):] = fill
    return out


@dataclass
class _Rel:
    """One defined relation. Every fact ever held since the last compaction has an id;
    by id: its depth (NONE: a tombstone left by a fact that left, reused when it comes
    back) and its births, a slice (start, length) of the pool of (t, count) entries.
    The main part is sorted by key (the natural layout) with ids 0..n-1 in key order;
    facts first seen since are sorted separately with their ids, first in a nursery of
    at most ``NURSERY_MAX`` (a commit copies it to insert into it), which then joins the
    young part, which joins the main part when it passes an eighth of it. The other
    layouts a join reads (``alts``: binary relations by swapped key from the start, the
    others as they are first asked for) have the same three parts, with ids. A fact
    touched by a commit gets its id at once (a fact never seen: a tombstone of the
    nursery)."""

    arity: int
    packing: _Packing
    keys: I64 = field(default_factory=lambda: _E64)
    ykeys: I64 = field(default_factory=lambda: _E64)
    yid: I64 = field(default_factory=lambda: _E64)
    nkeys: I64 = field(default_factory=lambda: _E64)  # the nursery of the young part
    nid: I64 = field(default_factory=lambda: _E64)
    # layout -> [keys, ids, young keys, young ids, nursery keys, nursery ids]
    alts: dict[Layout, list[I64]] = field(default_factory=dict)
    n_ids: int = 0
    depth: I32 = field(default_factory=lambda: _E32)  # by id (capacity beyond n_ids)
    bstart: I64 = field(default_factory=lambda: _E64)
    blen: I64 = field(default_factory=lambda: _E64)
    pool_t: I32 = field(default_factory=lambda: _E32)
    pool_w: I64 = field(default_factory=lambda: _E64)
    pool_n: int = 0  # used prefix of the pool
    live: int = 0  # entries of the pool that belong to a fact
    hist: I64 = field(default_factory=lambda: _E64)  # members per depth
    bhist: I64 = field(default_factory=lambda: _E64)  # birth entries per t
    # By id, the depth in the new version during a commit (equal to ``depth`` between
    # commits) and the fact's slot among the commit's touched facts (-1: untouched); the
    # ids of all keys. Saved as they are (a state opened from a segment store maps them,
    # and a commit writes the pages it touched), so opening rebuilds nothing.
    ndepth: I32 = field(default_factory=lambda: _E32)
    slot: I64 = field(default_factory=lambda: _E64)
    index: _Hash | None = None  # (None while initialize builds the layers)
    # While initialize builds the layers: the ids of the main part's keys (a fact's id is
    # its place in the order facts were derived, so a round's merge moves no id). None:
    # their positions, as everywhere else.
    kid: I64 | None = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        kernels.warm()
        self.__dict__.update(state)

    def _index_keys(self) -> None:
        self.index = _Hash(np.concatenate([self.keys, self.ykeys, self.nkeys]),
                           np.concatenate([np.arange(len(self.keys), dtype=np.int64),
                                           self.yid, self.nid]))

    def alt(self, layout: Layout) -> list[I64]:
        """The facts in ``layout`` (sorted the first time a join asks for it)."""
        got = self.alts.get(layout)
        if got is None:
            keys = self.packing.relayout(np.concatenate([self.keys, self.ykeys, self.nkeys]),
                                         natural(self.arity), layout)
            main = np.arange(len(self.keys), dtype=np.int64) if self.kid is None else self.kid
            ids = np.concatenate([main, self.yid, self.nid])
            order = np.argsort(keys)
            got = self.alts[layout] = [keys[order], ids[order], _E64, _E64, _E64, _E64]
        return got

    def view(self, layout: Layout, lo: int, hi: int, new: bool = False) -> _View:
        """The facts of depth in [lo, hi], in the old version (or the new one, during a
        commit), in ``layout``."""
        if hi < lo or hi < 0:
            return _empty_view()
        depth = self.ndepth if new else self.depth
        if layout != natural(self.arity):
            keys, ids, ykeys, yids, nkeys, nids = self.alt(layout)
            return _View([(keys, ids), (ykeys, yids), (nkeys, nids)], depth, lo=lo, hi=hi)
        return _View([(self.keys, self.kid), (self.ykeys, self.yid), (self.nkeys, self.nid)],
                     depth, lo=lo, hi=hi, hash=self.index)

    def hist_at(self, t: int) -> int:
        return int(self.hist[t]) if t < len(self.hist) else 0

    def find(self, keys: I64) -> I64:
        """The ids of ``keys`` (-1 where there is none)."""
        assert self.index is not None
        return self.index.get(keys)

    def _room(self, n: int) -> None:
        self.depth = _grown(self.depth, n, NONE)
        self.ndepth = _grown(self.ndepth, n, NONE)
        self.slot = _grown(self.slot, n, -1)
        self.bstart = _grown(self.bstart, n, 0)
        self.blen = _grown(self.blen, n, 0)

    def set_layers(self, keys: I64, depth: I32,
                   alts: dict[Layout, list[I64]] | None = None,
                   kid: I64 | None = None) -> None:
        """(initialize's rounds) The facts so far, sorted, and their depths by id: what a
        join of the old version reads. ``alts``: the facts in other layouts (sorted, with
        their ids), when known. ``kid``: the keys' ids (None: their positions)."""
        self.keys, self.n_ids, self.depth, self.kid = keys, len(keys), depth, kid
        self.ykeys = self.yid = self.nkeys = self.nid = _E64
        self.index = None
        self.alts = {} if alts is None else alts
        if self.arity == 2:
            self.alt(SWAPPED)

    def set_main(self, keys: I64, depth: I32, bstart: I64, blen: I64,
                 alts: dict[Layout, list[I64]] | None = None) -> None:
        """(initialize, compaction) The facts, sorted, as the main part; no young part and
        no nursery."""
        n = len(keys)
        cap = n + n // 8 + 1024  # (room for facts first seen later)
        self.set_layers(keys, _sized(depth, cap, NONE), alts)
        self.ndepth, self.slot = self.depth.copy(), np.full(cap, -1, np.int64)
        self.bstart, self.blen = _sized(bstart, cap, 0), _sized(blen, cap, 0)
        self._index_keys()

    def add_young(self, new: I64, given: I64 | None = None) -> I64:
        """Ids for facts never seen (sorted keys), as tombstones of the nursery. ``given``:
        their ids, the next ones (in any order), already in the hash index (a compiled
        loop gave them: ``linear.linear_loop``)."""
        if given is None:
            ids = np.arange(self.n_ids, self.n_ids + len(new), dtype=np.int64)
        else:
            ids = given
        self.n_ids += len(new)
        self._room(self.n_ids)
        if self.index is not None and given is None:
            self.index.insert(new, ids)
        self.nkeys, self.nid = kernels.merge_ids(self.nkeys, self.nid, new, ids)
        for layout, alt in self.alts.items():
            sk = self.packing.relayout(new, natural(self.arity), layout)
            so = np.argsort(sk)
            alt[4], alt[5] = kernels.merge_ids(alt[4], alt[5], sk[so], ids[so])
        if len(self.nkeys) > NURSERY_MAX:  # the nursery joins the young part
            self.ykeys, self.yid = kernels.merge_ids(self.ykeys, self.yid, self.nkeys,
                                                     self.nid)
            self.nkeys = self.nid = _E64
            for alt in self.alts.values():
                alt[2], alt[3] = kernels.merge_ids(alt[2], alt[3], alt[4], alt[5])
                alt[4] = alt[5] = _E64
        return ids

    def compact_facts(self) -> None:
        """The young part joins the main part and tombstones go: ids are renumbered."""
        keys = np.concatenate([self.keys, self.ykeys, self.nkeys])
        ids = np.concatenate([np.arange(len(self.keys), dtype=np.int64), self.yid, self.nid])
        order = np.argsort(keys, kind="stable")
        keys, ids = keys[order], ids[order]
        alive = self.depth[ids] != NONE
        keys, ids = keys[alive], ids[alive]
        self.set_main(keys, self.depth[ids], self.bstart[ids], self.blen[ids])

    def pool_room(self, n: int) -> None:
        """Room for n more pool entries past ``pool_n`` (dropping the entries no fact
        owns first, when they are many)."""
        if self.pool_n + n > len(self.pool_t) and self.pool_n > 2 * self.live + POOL_SLACK:
            self.compact()
        if self.pool_n + n > len(self.pool_t):
            self.pool_t = _grown(self.pool_t, self.pool_n + n, 0)
            self.pool_w = _grown(self.pool_w, self.pool_n + n, 0)

    def compact(self) -> None:
        """Drop the pool entries no fact owns (left by births that moved or ended)."""
        n = self.n_ids
        _, idx = _ranges(self.bstart[:n], self.bstart[:n] + self.blen[:n])
        self.pool_t, self.pool_w = self.pool_t[idx], self.pool_w[idx]
        self.bstart[:n] = np.cumsum(self.blen[:n]) - self.blen[:n]
        self.pool_n = self.live = len(idx)


I32_MAX = 2**31 - 1


def _counts_array(counts: I64) -> NDArray[Any]:
    """Derivation counts as kept: int32 when every one fits, else int64."""
    if len(counts) and int(counts.max()) > I32_MAX:
        return counts.astype(np.int64)
    return counts.astype(np.int32)


@dataclass
class _Counts:
    """One relation of a non-recursive stratum. Its facts are all at depth 0 of the
    outer time with one derivation count each (Δc[0] of a commit added to it), so it
    keeps sorted keys (the natural layout) and a count each, in three parts, a key in at
    most one: the main part; a young part of facts first seen since the main one was
    written, which joins it past an eighth of it; and a nursery of at most
    ``NURSERY_MAX``, which joins the young part, so a commit copies at most the nursery to
    insert. Counts are int32 until one passes 2^31 - 1 (then int64, every part). A fact
    that leaves keeps its key, with count 0, in the main and young parts (a tombstone,
    reused when it comes back, dropped when the parts merge, which they do past
    max(``PURGE_MIN``, a quarter of the main part) of them) and leaves the nursery at
    once. A commit finds its few keys by binary searches of each part (compiled,
    galloping for many sorted keys); no index is kept. The main part's keys never change
    in place (a merge writes new arrays), so the store may hold them as they are."""

    arity: int
    keys: I64 = field(default_factory=lambda: _E64)
    cnt: NDArray[Any] = field(default_factory=lambda: _E32)
    ykeys: I64 = field(default_factory=lambda: _E64)
    ycnt: NDArray[Any] = field(default_factory=lambda: _E32)
    nkeys: I64 = field(default_factory=lambda: _E64)
    ncnt: NDArray[Any] = field(default_factory=lambda: _E32)
    dead: int = 0  # tombstones (count 0) in the main and young parts

    def __setstate__(self, state: dict[str, Any]) -> None:
        kernels.warm()
        self.__dict__.update(state)

    def load(self, keys: I64, counts: I64) -> None:
        """The facts (sorted distinct keys) with their counts (all positive)."""
        self.keys, self.cnt = keys, _counts_array(counts)
        self.ykeys = self.nkeys = _E64
        self.ycnt = self.ncnt = self.cnt[:0].copy()
        self.dead = 0

    def __len__(self) -> int:
        """The number of facts."""
        return int(np.count_nonzero(self.cnt) + np.count_nonzero(self.ycnt)) + len(self.nkeys)

    def facts(self) -> I64:
        """Every fact's key, sorted: the main part's keys themselves (which never change
        in place) when they are all of them, as after a load (a store's coded rows then
        share them)."""
        if not len(self.ykeys) and not len(self.nkeys) and self.cnt.all():
            return self.keys
        return np.sort(np.concatenate([self.keys[self.cnt != 0], self.ykeys[self.ycnt != 0],
                                       self.nkeys]))

    def lookup(self, k: I64) -> tuple[I64, list[tuple[I64, Bool]]]:
        """The counts of keys ``k`` (0: no fact) and where each part holds them."""
        old = np.zeros(len(k), np.int64)
        at = []
        for keys, cnt in ((self.keys, self.cnt), (self.ykeys, self.ycnt),
                          (self.nkeys, self.ncnt)):
            pos, hit = _find(keys, k)
            if hit.any():
                old[hit] = cnt[pos[hit]]
            at.append((pos, hit))
        return old, at

    def update(self, k: I64, old: I64, new: I64, at: list[tuple[I64, Bool]]) -> None:
        """Keys ``k`` (sorted, distinct) of counts ``old`` (where ``lookup`` found them:
        ``at``) now count ``new`` (none negative; a key no part holds counts more than 0)."""
        if len(new) and int(new.max()) > I32_MAX and self.cnt.dtype != np.int64:
            self.cnt, self.ycnt = self.cnt.astype(np.int64), self.ycnt.astype(np.int64)
            self.ncnt = self.ncnt.astype(np.int64)
        dtype = self.cnt.dtype
        (mpos, mhit), (ypos, yhit), (npos, nhit) = at
        for cnt, pos, hit in ((self.cnt, mpos, mhit), (self.ycnt, ypos, yhit)):
            if hit.any():
                cnt[pos[hit]] = new[hit]
                self.dead += int(np.count_nonzero(old[hit] > 0) - np.count_nonzero(new[hit] > 0))
        fresh = ~(mhit | yhit | nhit)
        if nhit.any() or fresh.any():
            nk, nc = self.nkeys, self.ncnt.copy()
            nc[npos[nhit]] = new[nhit]
            if fresh.any():
                fk = k[fresh]
                where = np.searchsorted(nk, fk)
                nk, nc = np.insert(nk, where, fk), np.insert(nc, where, new[fresh].astype(dtype))
            keep = nc != 0
            self.nkeys, self.ncnt = nk[keep], nc[keep]
        if len(self.nkeys) > NURSERY_MAX:  # the nursery joins the young part
            self.ykeys, self.ycnt = self._merged((self.ykeys, self.ycnt),
                                                 (self.nkeys, self.ncnt))
            self.nkeys, self.ncnt = _E64, self.ncnt[:0].copy()
        if len(self.ykeys) > max(YOUNG_MIN, len(self.keys) // 8) or self.dead > max(
                PURGE_MIN, len(self.keys) // 4):
            self.keys, self.cnt = self._merged((self.keys, self.cnt), (self.ykeys, self.ycnt),
                                               (self.nkeys, self.ncnt))
            self.ykeys = self.nkeys = _E64
            self.ycnt = self.ncnt = self.cnt[:0].copy()
            self.dead = 0

    def change(self, pred: str, k: I64, w: I64) -> tuple[I64, I64, list[tuple[I64, Bool]]]:
        """The counts of keys ``k`` (sorted, distinct) before and after adding ``w``, and
        where the parts hold them (for ``update``)."""
        old, at = self.lookup(k)
        new = old + w
        if ((w > 0) & (new < old)).any():
            raise NotSupportedError(f"a fact of {pred} derived more than 2^63 - 1 ways",
                                    pred, NOT_SUPPORTED)
        if (new < 0).any():
            raise AssertionError(f"negative derivation count in {pred}")
        return old, new, at

    def check_functional(self, pred: str, coding: "_RowCoding", came: I64, went: I64,
                         d: Delta) -> None:
        """A key of functional ``pred`` (its columns the high half of ``coding``'s layout,
        one group code) with two values once the facts of keys ``came`` come and those of
        ``went`` go (their rows: ``d``) is DL302, named as
        ``deltalog.engine.heads.change_conflict`` names it; raised before the counts
        change."""
        if not len(came):
            return
        first = _distinct(came >> 32)
        n = np.zeros(len(first), np.int64)
        for keys, sign in ((self.with_high(first), 1), (went, -1), (came, 1)):
            pos, hit = _find(first, keys >> 32)
            n += sign * np.bincount(pos[hit], minlength=len(first))
        if not (n > 1).any():
            return
        k = len(coding.layout[0])

        def old_value(key: Row) -> Row | None:
            """The key's row in the old version (the key of an inserted row)."""
            cols = [coding.codes[t].find([v]) for v, t in zip(key, coding.types, strict=False)]
            code = coding.packing.group(cols, 1, known=True)
            facts = self.with_high(code) if code[0] >= 0 else _E64
            return coding.decode(facts[:1])[0] if len(facts) else None

        change_conflict(pred, k, d, old_value)
        raise AssertionError(f"two values for one key of {pred}, not found again")

    def with_high(self, first: I64) -> I64:
        """The facts (keys) whose high half is one of ``first`` (sorted, distinct)."""
        found = []
        for keys, cnt in ((self.keys, self.cnt), (self.ykeys, self.ycnt),
                          (self.nkeys, self.ncnt)):
            if len(keys):
                _, idx = _ranges(_positions(keys, first << 32),
                                 _positions(keys, (first + 1) << 32))
                found.append(keys[idx[cnt[idx] != 0]])
        return np.concatenate(found) if found else _E64

    def _merged(self, *parts: tuple[I64, NDArray[Any]]) -> tuple[I64, NDArray[Any]]:
        """The parts (disjoint sorted keys, counts) as one, tombstones dropped (they leave
        ``dead``)."""
        keys = np.concatenate([p[0] for p in parts])
        cnt = np.concatenate([p[1] for p in parts])
        keep = cnt != 0
        self.dead -= len(cnt) - int(np.count_nonzero(keep))
        keys, cnt = keys[keep], cnt[keep]
        order = np.argsort(keys, kind="stable")
        return keys[order], cnt[order]


def _hist(values: I32) -> I64:
    if not len(values):
        return _E64
    return np.bincount(values).astype(np.int64)


def _cyclic(atoms: Sequence[Sequence[str]]) -> bool:
    """Whether the hypergraph of the atoms' variables (an edge per atom) is cyclic: the
    GYO reduction (a variable of one edge only goes, and so does an edge within another)
    leaves some edge."""
    edges = [set(vs) for vs in atoms]
    while True:
        for e in edges:
            e -= {v for v in e if sum(v in f for f in edges) == 1}
        for i, e in enumerate(edges):
            if not e or any(j != i and e <= f for j, f in enumerate(edges)):
                del edges[i]
                break
        else:
            return bool(edges)


def _distinct(a: NDArray[Any]) -> NDArray[Any]:
    """The distinct values of ``a``, sorted (numpy's ``unique`` hashes when it is not asked
    for positions: ten times slower than sorting a million int64 keys)."""
    if len(a) <= 1:
        return a.copy()
    if (a[1:] > a[:-1]).all():  # (already: keys recoded in the order of their values)
        return a.copy()
    out = np.sort(a)
    keep = np.empty(len(out), np.bool_)
    keep[0] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]


def _with_room(arr: NDArray[Any], n: int) -> NDArray[Any]:
    """``arr`` with room for n entries (doubling)."""
    if n <= len(arr):
        return arr
    out = np.empty(max(n, 2 * len(arr), 1024), arr.dtype)
    out[: len(arr)] = arr
    return out


class _Touched:
    """The touched facts of one relation in a commit (Δc ≠ 0 somewhere), by slot, in the
    order they were first touched (arrays with room beyond ``n``): id, key, old depth,
    new depth (NONE: undecided or not a member; the relation's ``ndepth`` holds the same
    by id), whether decided, the cumulative Δr, r_old (their old births up to the
    current iteration) and where their old births are among the gathered ones (start,
    length, first not yet in r_old). ``log`` holds Δc as (slots, t, counts)."""

    def __init__(self) -> None:
        self.n = 0
        self.ids, self.keys, self.dr, self.r_old = _E64, _E64, _E64, _E64
        self.old, self.new = _E32, _E32
        self.decided = np.zeros(0, np.bool_)
        self.gstart, self.glen, self.gnext = _E64, _E64, _E64
        self.g_n = 0
        self.g_t, self.g_w = _E32, _E64
        self.log: list[tuple[I64, I32, I64]] = []
        # (``linear.linear_loop``) Δδo[t-1] by slot, and the log of Δc as arrays
        self.last_s, self.last_w = _E64, _E64
        self.log_s, self.log_t, self.log_w = _E64, _E32, _E64
        # (``kernels.commit_births``) the births after the commit, by slot
        self.nb_start, self.nb_len, self.nb_t, self.nb_w = _E64, _E64, _E32, _E64

    def births_room(self, facts: int, entries: int) -> None:
        """Room for the births after the commit of ``facts`` facts, ``entries`` in all."""
        self.nb_start, self.nb_len = _with_room(self.nb_start, facts), _with_room(
            self.nb_len, facts)
        self.nb_t, self.nb_w = _with_room(self.nb_t, entries), _with_room(self.nb_w, entries)

    def log_room(self, entries: int) -> None:
        """(``linear.linear_loop``) Room for ``entries`` in the log arrays."""
        self.log_s, self.log_t = _with_room(self.log_s, entries), _with_room(self.log_t, entries)
        self.log_w = _with_room(self.log_w, entries)

    def room(self, facts: int, births: int) -> None:
        n, g = self.n + facts, self.g_n + births
        if n <= len(self.ids) and g <= len(self.g_t):
            return
        self.ids, self.keys = _with_room(self.ids, n), _with_room(self.keys, n)
        self.dr, self.r_old = _with_room(self.dr, n), _with_room(self.r_old, n)
        self.old, self.new = _with_room(self.old, n), _with_room(self.new, n)
        self.decided = _with_room(self.decided, n)
        self.gstart, self.glen = _with_room(self.gstart, n), _with_room(self.glen, n)
        self.gnext = _with_room(self.gnext, n)
        self.last_s, self.last_w = _with_room(self.last_s, n), _with_room(self.last_w, n)
        self.g_t, self.g_w = _with_room(self.g_t, g), _with_room(self.g_w, g)


@dataclass(frozen=True)
class Linear:
    """A linear binary closure (``linear``): P's one rule copying input ``base`` (its
    columns swapped: ``base_swap``) and its one recursive rule joining P (join column
    ``jp``) with input ``edge`` (join column ``je``) on one variable, in either order,
    whose head's first column is P's other variable (``pfirst``) or E's."""

    pred: str
    base: str
    base_swap: bool
    edge: str
    jp: int
    je: int
    pfirst: bool


def _linear(prog: AnalyzedProgram, base: Sequence[_CRule], recursive: Sequence[_CRule],
            own: frozenset[str]) -> Linear | None:
    """The stratum's plan as a linear binary closure, None when it is not one."""
    if len(own) != 1 or len(base) != 1 or len(recursive) != 1:
        return None
    (pred,) = own
    schema = prog.schemas[pred]
    if schema.arity != 2 or schema.functional:
        return None
    b, r = base[0], recursive[0]
    for rule in (b, r):
        if rule.negs or rule.constraints or rule.casts or not all(
                isinstance(h, str) for h in rule.head):
            return None
        if any(len(a.vars) != 2 or len(set(a.vars)) != 2 for a in rule.atoms):
            return None
    if len(b.atoms) != 1 or set(b.head) != set(b.atoms[0].vars) or len(set(b.head)) != 2:
        return None
    if len(r.atoms) != 2 or len(r.own_atoms) != 1:
        return None
    j = r.own_atoms[0]
    p_atom, e_atom = r.atoms[j], r.atoms[1 - j]
    shared = set(p_atom.vars) & set(e_atom.vars)
    if len(shared) != 1:
        return None
    (y,) = shared
    pother = next(v for v in p_atom.vars if v != y)
    eother = next(v for v in e_atom.vars if v != y)
    if set(r.head) != {pother, eother} or len(set(r.head)) != 2:
        return None
    return Linear(pred, b.atoms[0].pred, b.head[0] != b.atoms[0].vars[0], e_atom.pred,
                  p_atom.vars.index(y), e_atom.vars.index(y), r.head[0] == pother)


class ColumnarStratum:
    """A graph-shaped stratum maintained the DBSP way over numpy arrays."""

    strategy = "dbsp"
    aggregates: StratumMaintainer | None = None  # (a state saved before them: none)
    # the inputs' views read by the commit under way, by (input, layout, new version)
    _views: "dict[tuple[str, Layout, bool], _View] | None" = None
    # (tests) the first round of every rule by delta queries, never the columnar core
    direct_first_round = False
    # (tests) False: a linear binary closure's commits by the generic steps too
    fused = True
    # a linear binary closure's plan (``linear``; None: the generic steps, as for a state
    # saved before it)
    linear: Linear | None = None
    # the touched facts' arrays of the last compiled loop, for the next (not saved: a
    # commit's scratch; dropped past ``LINEAR_KEEP`` facts)
    _linear_tc: "_Touched | None" = None
    # (a non-recursive stratum) the keys of the facts the last commit brought and took,
    # by predicate, for a maintainer reading its relations coded (``dbsp.aggregates``)
    last_change: "dict[str, tuple[I64, I64]]" = MappingProxyType({})  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_linear_tc", None)  # (scratch)
        state.pop("last_change", None)
        return state

    def __init__(self, prog: AnalyzedProgram, stratum: Stratum,
                 aggregates: StratumMaintainer | None = None,
                 coding: SharedCoding | None = None):
        """``aggregates``: the maintainer of ``aggregate_rules(stratum)`` (needed when the
        stratum has aggregate rules); its rows of p are the input p@agg. ``coding``: the
        codes and packing the engine's columnar strata share (default: its own)."""
        reason = columnar_reason(prog, stratum)
        if reason is not None:
            raise ValueError(f"stratum {stratum.preds} is not columnar: {reason}")
        if (aggregates is None) != (aggregate_rules(stratum) is None):
            raise ValueError(f"stratum {stratum.preds}: a maintainer of its aggregate "
                             "rules is needed when it has some, and only then")
        kernels.warm()
        self.aggregates = aggregates
        prog, rules = _bridged(prog, stratum)
        self.prog = prog
        self.stratum = stratum
        self.own = frozenset(stratum.preds)
        shared = coding if coding is not None else SharedCoding()
        self.codes: dict[str, _Codes] = shared.codes
        self.packing = shared.packing
        self.rules = [_CRule(prog, prepare(r), self.own, self.codes) for r in rules]
        self.base_rules = [r for r in self.rules if not r.own_atoms]
        self.recursive_rules = [r for r in self.rules if r.own_atoms]
        self.inputs = sorted({a.pred for r in self.rules for a in r.atoms} - self.own)
        # the column types of every input (a relation, or a negation's key set: one per
        # distinct negation, named "~pred#i", keyed by its bound variables)
        self.key_types: dict[str, tuple[str, ...]] = {
            p: tuple(c.type for c in prog.schemas[p].columns) for p in self.inputs}
        self.negations: dict[str, NegatedAtom] = {}
        names: dict[tuple[Any, ...], str] = {}
        # a negation's keys are coded in its variables' types: a number of a column of the
        # other type is converted (``neg_casts``: by key column, the type converted to,
        # None where the types agree), a key with no number equal to it dropped
        self.neg_casts: dict[str, tuple[str | None, ...]] = {}
        for rule in self.rules:
            for neg in rule.negs:
                types = tuple(rule.types[v] for v in neg.key_vars)
                sig = (_neg_signature(neg), types)
                if sig not in names:
                    names[sig] = name = f"~{neg.atom.pred}#{len(names)}"
                    self.negations[name] = neg
                    self.key_types[name] = types
                    casts = tuple(t if t != c else None
                                  for t, c in zip(types, _key_types(prog, neg), strict=True))
                    if any(casts):
                        self.neg_casts[name] = casts
                rule.neg_names.append(names[sig])
        # A non-recursive stratum (its delta queries read inputs only, at inner iteration
        # 0) keeps a count per fact (``_Counts``), unless a functional head has a key of
        # other than one column (its check reads the new version by the key's columns,
        # which the nested-time relations keep sorted; one column is the keys' high half).
        self.counted: dict[str, _Counts] = {}
        if not self.recursive_rules and all(
                not prog.schemas[p].functional or prog.schemas[p].key_arity == 1
                for p in stratum.preds):
            self.counted = {p: _Counts(prog.schemas[p].arity) for p in stratum.preds}
        self.rels = {p: _Rel(prog.schemas[p].arity, self.packing) for p in stratum.preds
                     if p not in self.counted}
        # per input: its keys in every layout a join has asked for (the natural one first)
        self.input_keys: dict[str, dict[Layout, I64]] = {}
        # per input and layout: the keys changed since ``input_keys`` was written
        # (sorted; depth 0: present, NONE: gone), so a commit does not rewrite the inputs
        self.input_patch: dict[str, dict[Layout, tuple[I64, I32]]] = {}
        self.work: dict[str, int] = {}
        self._touched: dict[str, _Touched] = {}
        self._input_delta: dict[str, tuple[I64, I64]] = {}
        self._term_depths: dict[tuple[int, int, int], I32] = {}  # (``_depths_of``)
        self._counters: dict[str, int] = {}
        if self.rels and not self.negations and self.aggregates is None:
            self.linear = _linear(prog, self.base_rules, self.recursive_rules, self.own)
            if self.linear is not None:
                linear.warm()

    # -- encoding -------------------------------------------------------------------------
    def _neg_key(self, name: str, key: Row) -> Row | None:
        """A key of the negation ``name`` as its variables' types hold it (None: no number
        of a variable's type is equal to it, and no binding reads it)."""
        out: list[Value] = []
        for v, typ in zip(key, self.neg_casts[name], strict=True):
            value = v if typ is None else bind_as(v, typ)
            if value is None:
                return None
            out.append(value)
        return tuple(out)

    def _neg_keys(self, name: str, neg: NegatedAtom, cols: Sequence[NDArray[Any]]) -> I64:
        """(initialize) The keys of negation ``name`` from its relation's rows by column,
        as ``NegatedAtom.key_of`` gives them one row at a time: rows that hold the atom's
        constants and a repeated variable's one value, projected on its variables (whose
        types are the columns', ``neg_casts`` having none for it; one variable at least)."""
        keep = np.ones(len(cols[0]), np.bool_)
        first: dict[str, int] = {}
        for i, arg in enumerate(neg.atom.args):
            if isinstance(arg, Const):
                keep &= cols[i] == arg.value
            elif arg.name in neg.key_vars and first.setdefault(arg.name, i) != i:
                keep &= cols[i] == cols[first[arg.name]]
        return self._coding(name).encode_columns([cols[first[v]][keep] for v in neg.key_vars])

    def _natural(self, pred: str) -> Layout:
        """The natural layout of ``pred`` (a relation, or a negation's key set)."""
        if pred in self.key_types:
            return natural(len(self.key_types[pred]))
        return natural(self.prog.schemas[pred].arity)

    def _coding(self, pred: str) -> _RowCoding:
        """The coding of rows of ``pred`` (a relation or a negation's key set; a key of no
        column packs as 0) as natural keys."""
        types = self.key_types[pred] if pred in self.key_types else tuple(
            c.type for c in self.prog.schemas[pred].columns)
        return _RowCoding(types, self.codes, self.packing)

    def _shares(self, coding: Any, pred: str) -> bool:
        """Whether rows of ``pred`` coded by ``coding`` have the keys this stratum gives
        them (the same codes and packing)."""
        return (type(coding) is _RowCoding and coding.codes is self.codes
                and coding.packing is self.packing and coding.types == self.key_types[pred]
                and coding.layout == natural(len(coding.types)))

    def _encode(self, pred: str, rows: Sequence[Row]) -> I64:
        return self._coding(pred).encode(rows)

    def _decode(self, pred: str, keys: I64) -> list[Row]:
        return self._coding(pred).decode(keys)

    # -- inputs ---------------------------------------------------------------------------
    def _set_input(self, pred: str, keys: I64, distinct: bool = False) -> None:
        """The input's natural keys (``distinct``: sorted and distinct already, kept as
        they are: never changed in place, so they may be another's too)."""
        nat = self._natural(pred)
        self.input_keys[pred] = {nat: keys if distinct else _distinct(keys)}
        self.input_patch[pred] = {nat: (_E64, _E32)}

    def _input_keys(self, pred: str, layout: Layout) -> I64:
        """The input's keys in ``layout`` (and its patch), sorted the first time a join
        asks for it."""
        by, patches = self.input_keys[pred], self.input_patch[pred]
        got = by.get(layout)
        if got is None:
            nat = self._natural(pred)
            got = by[layout] = np.sort(self.packing.relayout(by[nat], nat, layout))
            pk, pd = patches[nat]
            pk = self.packing.relayout(pk, nat, layout)
            order = np.argsort(pk)
            patches[layout] = (pk[order], pd[order])
        return got

    def _set_delta(self, pred: str, d: Delta) -> None:
        """The commit's change of input ``pred`` (a relation or a negation's key set), as
        sorted natural keys and weights."""
        rows = list(d)
        k = self._encode(pred, rows)
        w = np.fromiter((d[r] for r in rows), np.int64, len(rows))
        order = np.argsort(k)
        self._input_delta[pred] = (k[order], w[order])

    def _input_delta_in(self, pred: str, layout: Layout) -> tuple[I64, I32]:
        """The input's change in ``layout`` (sorted keys; depth 0: came, NONE: gone)."""
        dk, dw = self._input_delta[pred]
        nat = self._natural(pred)
        if layout != nat:
            dk = self.packing.relayout(dk, nat, layout)
            order = np.argsort(dk)
            dk, dw = dk[order], dw[order]
        return dk, np.where(dw > 0, 0, NONE).astype(np.int32)

    def _input_view(self, pred: str, layout: Layout, new: bool) -> _View:
        """The input in ``layout``, old or new version; kept for the rest of a commit (its
        delta queries read the same versions again and again)."""
        new = new and pred in self._input_delta
        views = self._views
        if views is not None and (pred, layout, new) in views:
            return views[(pred, layout, new)]
        keys = self._input_keys(pred, layout)
        pk, pd = self.input_patch[pred][layout]
        if new:
            pk, pd = kernels.overlay(pk, pd, *self._input_delta_in(pred, layout))
        view = _View([(keys, None)], None, pk, pd) if len(pk) else _View([(keys, None)], None)
        if views is not None:
            views[(pred, layout, new)] = view
        return view

    # -- one delta query ------------------------------------------------------------------
    def _join(self, rule: _CRule, p: int, seed: I64, w: I64,
              sources: Sequence[Source]) -> tuple[I64, I64]:
        """Head keys and weights of every assignment of ``rule``'s body with factor p read
        from ``seed`` (natural packed keys, weights) and factor q from ``sources[q]``:
        the atoms, then the negations (their key sets, seeded by a change of one)."""
        self._counters["delta_queries"] += 1
        pair = rule.pairs.get(p)
        if pair is not None:  # (the generic steps below, in one: it is most queries)
            other, fixed, free = pair
            seed_atom = rule.atoms[p]
            bound = dict(zip(seed_atom.vars, self.packing.unpack(
                self._natural(seed_atom.pred), seed), strict=True))
            view = sources[other.index]((fixed, (free,)))
            first = self.packing.group([bound[other.vars[i]] for i in fixed], len(seed),
                                       known=True)
            own, val, seen = view.expand(first)
            self._counters["rows_gathered"] += seen
            if not len(own):
                return _E64, _E64
            found = {v: c[own] for v, c in bound.items()}
            found[other.vars[free]] = val
            return rule.project(found, len(own), self._as_float_codes, self.packing), w[own]
        n_atoms = len(rule.atoms)
        cols: dict[str, I64] = {}
        if p != UNIT:
            seed_vars = rule.atoms[p].vars if p < n_atoms else rule.negs[p - n_atoms].key_vars
            seed_pred = rule.atoms[p].pred if p < n_atoms else rule.neg_names[p - n_atoms]
            cols = dict(zip(seed_vars, self.packing.unpack(self._natural(seed_pred), seed),
                            strict=True))
        pending = [a for a in rule.atoms if a.index != p]
        negs = [k for k in range(len(rule.negs)) if n_atoms + k != p]
        todo = list(range(len(rule.constraints)))
        cols, w = self._constrained(rule, cols, w, todo, negs, sources)
        n = len(w)
        for v in rule.orders[p]:
            if not n:
                break
            if v in cols:
                continue
            source = self._source(rule, v, cols, todo)
            if source is not None:  # an assignment binds v
                k, expr = source
                todo.remove(k)
                vals, ok = self._codes_of(rule, expr, cols, n, rule.types[v])
                cols = {u: c[ok] for u, c in cols.items()}
                cols[v], w = vals[ok], w[ok]
                n = len(w)
                cols, w = self._constrained(rule, cols, w, todo, negs, sources)
                n = len(w)
                continue
            ready = [a for a in pending if v in a.vars and all(u in cols for u in a.vars
                                                               if u != v)]
            partial = [a for a in pending if v in a.vars and any(u in cols for u in a.vars)]
            if ready:
                owner, vals = self._extend(v, ready, cols, n, sources)
                pending = [a for a in pending if a not in ready]
                bound = {v: vals}
            elif partial:  # v and the atom's other free variables, from its rows
                holder = max(partial, key=lambda a: sum(u in cols for u in a.vars))
                owner, bound = self._expand_partial(v, holder, cols, n, sources)
                pending.remove(holder)
            else:
                holder = next(a for a in pending if v in a.vars)
                i = holder.vars.index(v)
                layout = ((i,), tuple(j for j in range(len(holder.vars)) if j != i))
                values = sources[holder.index](layout).firsts()
                owner = np.repeat(np.arange(n, dtype=np.int64), len(values))
                bound = {v: np.tile(values, n)}
                self._counters["rows_gathered"] += len(owner)
            cols = {k: c[owner] for k, c in cols.items()}
            cols.update(bound)
            w = w[owner]
            n = len(w)
            # atoms whose variables are all bound now: checks
            done = [a for a in pending if all(u in cols for u in a.vars)]
            if done:
                cols, w = self._checked(done, cols, w, sources)
                n = len(w)
                pending = [a for a in pending if a not in done]
            cols, w = self._constrained(rule, cols, w, todo, negs, sources)
            n = len(w)
        if n and pending:  # atoms over the seed's variables only
            cols, w = self._checked(pending, cols, w, sources)
            n = len(w)
        if not n:
            return _E64, _E64
        assert not todo and not negs, f"never checked: {todo}, negations {negs}"
        return rule.project(cols, n, self._as_float_codes, self.packing), w

    # -- comparisons and assignments (whole columns) ----------------------------------------
    @staticmethod
    def _source(rule: _CRule, v: str, cols: Mapping[str, I64],
                todo: list[int]) -> tuple[int, Expr] | None:
        """An ``=`` of ``todo`` that computes v from bound variables: (its index, the
        expression)."""
        for k in todo:
            left, op, right = rule.constraints[k]
            if op != "=":
                continue
            for target, expr in ((left, right), (right, left)):
                if isinstance(target, Var) and target.name == v and expr_vars(expr) <= cols.keys():
                    return k, expr
        return None

    def _constrained(self, rule: _CRule, cols: dict[str, I64], w: I64, todo: list[int],
                     negs: list[int], sources: Sequence[Source]
                     ) -> tuple[dict[str, I64], I64]:
        """The rows that satisfy every constraint of ``todo`` and every negation of
        ``negs`` whose variables are all bound (those leave ``todo`` and ``negs``)."""
        ready = [k for k in todo if all(expr_vars(x) <= cols.keys()
                                        for x in (rule.constraints[k][0], rule.constraints[k][2]))]
        ready_negs = [k for k in negs if all(v in cols for v in rule.negs[k].key_vars)]
        if not (ready or ready_negs) or not len(w):
            return cols, w
        n = len(w)
        keep = np.ones(n, np.bool_)
        for k in ready:
            todo.remove(k)
            keep &= self._holds(rule, *rule.constraints[k], cols, n)
        for k in ready_negs:
            negs.remove(k)
            key_vars = rule.negs[k].key_vars
            nat = natural(len(key_vars))
            keys = self.packing.pack(nat, [cols[u] for u in key_vars], n, known=True)
            self._counters["rows_gathered"] += n
            keep &= ~sources[len(rule.atoms) + k](nat).contains(keys)
        return {u: c[keep] for u, c in cols.items()}, w[keep]

    def _holds(self, rule: _CRule, left: Expr, op: str, right: Expr,
               cols: Mapping[str, I64], n: int) -> Bool:
        if _expr_type(left, rule.types) == "string":
            if op in ("=", "!="):  # on codes
                a, _ = self._codes_of(rule, left, cols, n, "string")
                b, _ = self._codes_of(rule, right, cols, n, "string")
                return a == b if op == "=" else a != b
            sa, sb = self._strings(left, cols, n), self._strings(right, cols, n)
            return _NP_CMP[op](sa, sb).astype(np.bool_)  # type: ignore[no-any-return]
        try:
            a, oka = self._numbers(rule, left, cols, n)
            b, okb = self._numbers(rule, right, cols, n)
            if a.dtype != b.dtype:  # an int against a float: exact through float64 only
                if not exact_as_floats(a if a.dtype == np.int64 else b):
                    raise _Slow
                a, b = a.astype(np.float64), b.astype(np.float64)
        except _Slow:
            la, lb = self._slow(rule, left, cols, n), self._slow(rule, right, cols, n)
            return np.fromiter((x is not None and y is not None and compare(op, x, y)
                                for x, y in zip(la, lb, strict=True)), np.bool_, n)
        return _NP_CMP[op](a, b) & oka & okb  # type: ignore[no-any-return]

    def _strings(self, e: Expr, cols: Mapping[str, I64], n: int) -> NDArray[np.object_]:
        """The string values of a variable or a constant (an object array), for an order."""
        out = np.empty(n, object)
        if isinstance(e, Var):
            out[:] = self.codes["string"].decode(cols[e.name])
        else:
            assert isinstance(e, Const)
            out[:] = [e.value] * n
        return out

    def _codes_of(self, rule: _CRule, e: Expr, cols: Mapping[str, I64], n: int,
                  typ: str) -> tuple[I64, Bool]:
        """The codes of ``e``'s value as a ``typ`` (its own type, or a float for an int:
        the float equal to it, ``semantics.bind_as``) on every row, and the rows where it
        has one."""
        every = np.ones(n, np.bool_)
        if isinstance(e, Var) and rule.types[e.name] == typ:
            return cols[e.name], every
        assert typ in TYPES
        if isinstance(e, Const):
            value = bind_as(e.value, typ)
            if value is None:
                return np.zeros(n, np.int64), ~every
            return np.full(n, self.codes[typ].encode([value])[0], np.int64), every
        out = np.zeros(n, np.int64)
        try:
            vals, ok = self._numbers(rule, e, cols, n)
            if typ == "float" and vals.dtype == np.int64:
                vals, exact = ints_as_floats(vals)
                ok = ok & exact
            elif typ == "int" and vals.dtype == np.float64:
                vals, exact, beyond = floats_as_ints(vals)
                if beyond:  # (an int beyond int64: coded from the Python int)
                    raise _Slow
                ok = ok & exact
            out[ok] = self.codes[typ].encode_array(vals[ok])
        except _Slow:
            py = [bind_as(x, typ) if x is not None else None
                  for x in self._slow(rule, e, cols, n)]
            ok = np.fromiter((x is not None for x in py), np.bool_, n)
            out[ok] = self.codes[typ].encode([x for x in py if x is not None])
        return out, ok

    def _as_float_codes(self, codes: I64) -> I64:
        """The codes of int codes' values as floats (a head column of floats)."""
        vals, big = self.codes["int"].ints(codes)
        if big.any():
            return self.codes["float"].encode(
                [coerce(v, "float") for v in self.codes["int"].decode(codes)])
        return self.codes["float"].encode_array(vals.astype(np.float64))

    def _numbers(self, rule: _CRule, e: Expr, cols: Mapping[str, I64],
                 n: int) -> tuple[Num, Bool]:
        """``e`` on every row (int64, or float64 where its type is a float) and where it
        has a value (no division by zero; a float result finite); raises ``_Slow`` when an
        integer operand or result leaves int64."""
        every = np.ones(n, np.bool_)
        if isinstance(e, Var):
            if rule.types[e.name] == "float":
                return self.codes["float"].floats(cols[e.name]), every
            vals, big = self.codes["int"].ints(cols[e.name])
            if big.any():
                raise _Slow
            return vals, every
        if isinstance(e, Const):
            if isinstance(e.value, float):
                return np.full(n, e.value, np.float64), every
            if _i64(e.value) is None:
                raise _Slow
            return np.full(n, e.value, np.int64), every
        assert isinstance(e, BinOp)
        a, oka = self._numbers(rule, e.left, cols, n)
        b, okb = self._numbers(rule, e.right, cols, n)
        ok = oka & okb
        if a.dtype != np.int64 or b.dtype != np.int64:  # IEEE, as Python's floats
            return float_arith(e.op, a, b, ok)
        with np.errstate(all="ignore"):
            if e.op == "+":
                r = a + b
                over = ((a ^ r) & (b ^ r)) < 0
            elif e.op == "-":
                r = a - b
                over = ((a ^ b) & (a ^ r)) < 0
            elif e.op == "*":
                over = np.abs(a.astype(np.float64) * b.astype(np.float64)) >= 2.0**62
                r = a * b
            else:  # / and %: truncated toward zero; no result for a zero divisor
                ok &= b != 0
                over = (a == _MIN) | (b == _MIN)
                d = np.where(b == 0, 1, b)
                q = np.abs(a) // np.abs(d)
                q = np.where((a < 0) != (d < 0), -q, q)
                r = q if e.op == "/" else a - d * q
        if (over & ok).any():
            raise _Slow
        return r, ok

    def _slow(self, rule: _CRule, e: Expr, cols: Mapping[str, I64],
              n: int) -> list[Value | None]:
        """``e`` row by row with the language's unbounded integers (``_Slow``)."""
        names = sorted(expr_vars(e))
        decoded = [self.codes[rule.types[v]].decode(cols[v]) for v in names]
        return [eval_expr(e, dict(zip(names, vals, strict=True)))
                for vals in zip(*decoded, strict=True)] if names else [eval_expr(e, {})] * n

    def _checked(self, atoms: Sequence[PlanAtom], cols: dict[str, I64], w: I64,
                 sources: Sequence[Source]) -> tuple[dict[str, I64], I64]:
        """The rows (columns and weights) that every atom of ``atoms`` holds."""
        keep = np.ones(len(w), np.bool_)
        for a in atoms:
            keep &= self._check(a, [cols[u] for u in a.vars], len(w), sources)
        return {k: c[keep] for k, c in cols.items()}, w[keep]

    def _check(self, a: PlanAtom, columns: Sequence[I64], n: int,
               sources: Sequence[Source]) -> Bool:
        """Whether atom ``a`` holds the rows given by its columns' codes."""
        nat = natural(len(a.vars))
        self._counters["rows_gathered"] += n
        return sources[a.index](nat).contains(self.packing.pack(nat, columns, n, known=True))

    def _extend(self, v: str, ready: list[PlanAtom], cols: Mapping[str, I64], n: int,
                sources: Sequence[Source]) -> tuple[I64, I64]:
        """Bind v row by row from the ready atom with the fewest candidates, checked
        against the other ready atoms."""
        multi = [a for a in ready if len(a.vars) > 1]
        unary = [a for a in ready if len(a.vars) == 1]
        if not multi:  # only unary atoms hold v: all their values
            firsts = sources[ready[0].index](natural(1)).firsts()
            owner = np.repeat(np.arange(n, dtype=np.int64), len(firsts))
            vals = np.tile(firsts, n)
            self._counters["rows_gathered"] += len(vals)
            keep = np.ones(len(vals), np.bool_)
            for a in ready[1:]:
                keep &= sources[a.index](natural(1)).contains(vals << 32)
            return owner[keep], vals[keep]

        def lookup(a: PlanAtom) -> tuple[_View, I64]:
            """The atom's rows with v last, and the code of the other columns' values (the
            view first: making it codes the pairs of its rows)."""
            i = a.vars.index(v)
            others = tuple(j for j in range(len(a.vars)) if j != i)
            view = sources[a.index]((others, (i,)))
            return view, self.packing.group([cols[a.vars[j]] for j in others], n, known=True)

        if len(ready) == 1:  # one atom holds v: its rows are the values
            view, first = lookup(ready[0])
            own, val, seen = view.expand(first)
            self._counters["rows_gathered"] += seen
            return own, val
        looked = [lookup(a) for a in multi]
        if len(looked) == 1:
            choice = np.zeros(n, np.int64)
        else:
            choice = np.argmin(np.stack([view.counts(first) for view, first in looked]), axis=0)
        owners: list[I64] = []
        values: list[I64] = []
        for i, (view, first) in enumerate(looked):
            rows = np.flatnonzero(choice == i) if len(looked) > 1 else None
            f = first if rows is None else first[rows]
            own, val, seen = view.expand(f)
            self._counters["rows_gathered"] += seen
            if rows is not None:
                own = rows[own]
            keep = np.ones(len(own), np.bool_)
            for j, other in enumerate(multi):
                if j != i:
                    keep &= self._check(other, [val if u == v else cols[u][own]
                                                for u in other.vars], len(own), sources)
            for a in unary:
                keep &= sources[a.index](natural(1)).contains(val << 32)
            owners.append(own[keep])
            values.append(val[keep])
        return np.concatenate(owners), np.concatenate(values)

    def _expand_partial(self, v: str, a: PlanAtom, cols: Mapping[str, I64], n: int,
                        sources: Sequence[Source]) -> tuple[I64, dict[str, I64]]:
        """Bind v and the other free variables of atom ``a`` (some of whose variables are
        bound) from its rows: (owner, codes by variable)."""
        fixed = tuple(j for j, u in enumerate(a.vars) if u in cols)
        i = a.vars.index(v)
        free = (i, *(j for j, u in enumerate(a.vars) if u not in cols and j != i))
        view = sources[a.index]((fixed, free))  # (first: it codes the pairs of its rows)
        first = self.packing.group([cols[a.vars[j]] for j in fixed], n, known=True)
        own, tail, seen = view.expand(first)
        self._counters["rows_gathered"] += seen
        return own, {a.vars[j]: c for j, c in zip(
            free, self.packing.ungroup(tail, len(free)), strict=True)}

    def _collect(self, out: dict[str, list[tuple[I64, I64]]], rule: _CRule,
                 res: tuple[I64, I64]) -> None:
        if len(res[0]):
            out.setdefault(rule.pred, []).append(res)

    @staticmethod
    def _zsets(out: Mapping[str, list[tuple[I64, I64]]]) -> dict[str, tuple[I64, I64]]:
        zs = {}
        for pred, parts in out.items():
            k, w = _sum_by_key(np.concatenate([p[0] for p in parts]),
                               np.concatenate([p[1] for p in parts]))
            if len(k):
                zs[pred] = (k, w)
        return zs

    # -- initialize -----------------------------------------------------------------------
    def _first_round(self, rule: _CRule) -> tuple[I64, I64] | None:
        """Head keys and derivation counts of a cyclic base rule (three atoms or more, no
        negation) over its inputs, by the columnar core's compiled leapfrog triejoin:
        every assignment of the body one derivation (no variable existential), the
        inputs recoded as the core codes them (order-preserving) and the head rows back
        into the stratum's codes. Worst-case optimal where the delta query seeded by a
        whole input is not (a cyclic body: the triangles). None when the rule is not
        one it takes, or a value has no code there (the delta query then runs: on an
        acyclic body it is as fast, with no recoding)."""
        # (x~int is x read from int columns: the body's hypergraph is the rule's)
        if (len(rule.atoms) < 3 or rule.negs or self.direct_first_round
                or not _cyclic([[v.removesuffix(CAST_INT) for v in a.vars]
                                for a in rule.atoms])):
            return None
        preds = sorted({a.pred for a in rule.atoms})
        values = {p: self._coding(p).columns(self.input_keys[p][self._natural(p)])
                  for p in preds}
        strings = [set(col.tolist()) for p in preds
                   for col, t in zip(values[p], self.key_types[p], strict=True)
                   if t == "string"]
        strings.append(set(rule_strings(rule.prep.rule)))
        try:
            codes = Codes(strings)
            rels = {p: Relation.of(encode_table(codes, self.prog.schemas[p], values[p], len(
                self.input_keys[p][self._natural(p)]))) for p in preds}
            compiled = CompiledRule(self.prog, rule.prep, codes, rels)
            stats = JoinStats()
            heads = compiled.heads([rels[a.pred] for a in rule.atoms], frozenset(), stats,
                                   every=True)
        except NotColumnar:
            return None
        counters = self._counters
        counters["first_round_joins"] = counters.get("first_round_joins", 0) + 1
        counters["first_round_steps"] = counters.get("first_round_steps", 0) + stats.operations
        schema = self.prog.schemas[rule.pred]
        keys = self._coding(rule.pred).encode_columns(
            [codes.decode(heads[:, i], c.type) for i, c in enumerate(schema.columns)]
        ) if schema.arity else self.packing.pack(natural(0), [], len(heads))
        return keys, np.ones(len(keys), np.int64)

    def initialize(self, store: RelationStore) -> dict[str, CodedRows | set[Row]]:
        self._counters = {"delta_queries": 0, "rows_gathered": 0}
        aggregated = {}
        if self.aggregates is not None:
            aggregated = {p + AGGREGATED: rows
                          for p, rows in self.aggregates.initialize(store).items()}
        for pred in self.inputs:
            held = aggregated[pred] if pred in aggregated else store[pred].rows
            if type(held) is CodedRows and self._shares(held.coding, pred):
                self._set_input(pred, held.all_keys(), distinct=True)  # its keys are ours
            elif type(held) is CodedRows:  # coded otherwise: its columns recoded
                self._set_input(pred, self._coding(pred).encode_columns(held.columns()))
            else:
                self._set_input(pred, self._encode(pred, list(held)))
        for name, neg in self.negations.items():
            held = store[neg.atom.pred].rows
            if type(held) is CodedRows and neg.key_vars and name not in self.neg_casts:
                self._set_input(name, self._neg_keys(name, neg, held.columns()))
                continue
            keys = {key for row in held if (key := neg.key_of(row)) is not None}
            if name in self.neg_casts:
                keys = {nk for key in keys if (nk := self._neg_key(name, key)) is not None}
            self._set_input(name, self._encode(name, list(keys)))
        c0: dict[str, list[tuple[I64, I64]]] = {}
        for pred in self.stratum.preds:
            facts = list(self.prog.facts.get(pred, ()))
            if facts:
                k = self._encode(pred, facts)
                c0.setdefault(pred, []).append((k, np.ones(len(k), np.int64)))
        for rule in self.base_rules:
            first = self._first_round(rule)
            if first is not None:
                self._collect(c0, rule, first)
                continue
            if rule.atoms:
                a0 = rule.atoms[0]
                p, seed = 0, self._input_keys(a0.pred, self._natural(a0.pred))
            else:  # no positive atom: one assignment of no variable, then the body's own
                p, seed = UNIT, np.zeros(1, np.int64)
            srcs = [self._src_input(a.pred, True) for a in rule.atoms]
            srcs += [self._src_input(name, True) for name in rule.neg_names]
            self._collect(c0, rule, self._join(rule, p, seed, np.ones(len(seed), np.int64),
                                               srcs))
        ct = self._zsets(c0)
        if self.counted:
            return self._initialize_counted(ct)
        births: dict[str, list[tuple[I64, I32, I64]]] = {p: [] for p in self.rels}
        layers: dict[str, list[I64]] = {p: [] for p in self.rels}
        # per relation: its facts so far (sorted), their depths, and the facts by swapped
        # key with their positions (binary relations), each kept by merging a round's new
        # facts in, not by sorting again
        members: dict[str, I64] = {p: _E64 for p in self.rels}
        mids: dict[str, I64] = {p: _E64 for p in self.rels}  # their ids (derivation order)
        depths: dict[str, I32] = {p: _E32 for p in self.rels}  # by id
        swapped: dict[str, list[I64]] = {p: [_E64] * 6 for p in self.rels}
        t = 0
        while True:
            born = 0
            for pred, (k, w) in ct.items():
                if (w <= 0).any():
                    raise AssertionError(f"negative derivation count in {pred}")
                births[pred].append((k, np.full(len(k), t, np.int32), w))
                _, hit = _find(members[pred], k)
                new = k[~hit]
                layers[pred].append(new)
                if len(new):
                    # ids in derivation order: a round's merges (one compiled pass each)
                    # move no fact's id, so its depth is appended, not moved
                    nid = np.arange(len(members[pred]), len(members[pred]) + len(new),
                                    dtype=np.int64)
                    depths[pred] = np.concatenate([depths[pred],
                                                   np.full(len(new), t, np.int32)])
                    members[pred], mids[pred] = kernels.merge_ids(members[pred], mids[pred],
                                                                  new, nid)
                    if self.rels[pred].arity == 2:
                        sk, sid = swapped[pred][:2]
                        nsk = _swap(new)
                        order = np.argsort(nsk)
                        both, ids = kernels.merge_ids(sk, sid, nsk[order], nid[order])
                        swapped[pred] = [both, ids, _E64, _E64, _E64, _E64]
                    born += len(new)
            for pred in self.rels:
                if len(layers[pred]) <= t:
                    layers[pred].append(_E64)
            self._build_rels(members, mids, depths, swapped)
            if not born or not self.recursive_rules:
                break
            t += 1
            out: dict[str, list[tuple[I64, I64]]] = {}
            for rule in self.recursive_rules:
                for j in rule.own_atoms:
                    seed = layers[rule.atoms[j].pred][t - 1]
                    if not len(seed):
                        continue
                    srcs = [self._src_input(a.pred, True) if a.pred not in self.own
                            else self._src_own(a.pred, a.index, j, t, False)
                            for a in rule.atoms]
                    srcs += [self._src_input(name, True) for name in rule.neg_names]
                    self._collect(out, rule, self._join(
                        rule, j, seed, np.ones(len(seed), np.int64), srcs))
            ct = self._zsets(out)
        for pred, rel in self.rels.items():
            parts = births[pred]
            n = len(rel.keys)
            blen, bstart = np.zeros(n, np.int64), np.zeros(n, np.int64)
            if parts:
                # a fact's births in t order: each round's facts are distinct, so a
                # counting sort by fact puts the rounds' entries in place one round at a time
                at = [_positions(rel.keys, p[0]) for p in parts]
                blen = np.bincount(np.concatenate(at), minlength=n).astype(np.int64)
                if not blen.all():
                    raise AssertionError("a fact without births")
                bstart = np.cumsum(blen) - blen
                total = int(blen.sum())
                room = total + total // 4 + 1024  # slack for births that move
                rel.pool_t, rel.pool_w = np.zeros(room, np.int32), np.zeros(room, np.int64)
                fill = bstart.copy()
                for pos, (_, bt, bw) in zip(at, parts, strict=True):
                    slots = fill[pos]
                    rel.pool_t[slots], rel.pool_w[slots] = bt, bw
                    fill[pos] += 1
                rel.pool_n = rel.live = total
                # births per t, members per depth: one count per round (a fact's depth is
                # the round it was first derived in)
                bh = np.zeros(t + 1, np.int64)
                for k, bt, _ in parts:
                    if len(k):
                        bh[int(bt[0])] += len(k)
                rel.bhist = kernels.trim_zeros(bh)
            # from ids in derivation order to positions in key order (the main part's ids)
            kid = rel.kid if rel.kid is not None else np.arange(n, dtype=np.int64)
            place = np.empty(n, np.int64)
            place[kid] = np.arange(n, dtype=np.int64)
            alts = {layout: [alt[0], place[alt[1]], *alt[2:]] for layout, alt in rel.alts.items()}
            rel.set_main(rel.keys, rel.depth[kid], bstart, blen, alts=alts)
            rel.hist = kernels.trim_zeros(
                np.array([len(new) for new in layers[pred]], np.int64))
        self.work = self._work(t + 1, sum(len(r.keys) for r in self.rels.values()))
        for pred, rel in self.rels.items():
            if self.prog.schemas[pred].functional:  # (sorted: one message whatever the order)
                check_functional(self.prog.schemas[pred], sorted(self._decode(pred, rel.keys)))
        # the store takes the facts coded (a copy: the stratum's arrays change in place),
        # those of a predicate of no columns as rows (columns would not say how many)
        return {p: CodedRows(rel.keys.copy(), self._coding(p)) if rel.arity else
                set(self._decode(p, rel.keys)) for p, rel in self.rels.items()}

    def _initialize_counted(self, ct: Mapping[str, tuple[I64, I64]]
                            ) -> dict[str, CodedRows | set[Row]]:
        """(initialize, a non-recursive stratum) Δc[0] is every fact with its count."""
        for pred, rel in self.counted.items():
            k, w = ct.get(pred, (_E64, _E64))
            if (w <= 0).any():
                raise AssertionError(f"negative derivation count in {pred}")
            rel.load(k, w)
        self.work = self._work(1, sum(len(r.keys) for r in self.counted.values()))
        for pred, rel in self.counted.items():
            if self.prog.schemas[pred].functional:  # (sorted: one message whatever the order)
                check_functional(self.prog.schemas[pred], sorted(self._decode(pred, rel.keys)))
        # the store takes the facts coded (the main part's keys, which never change in
        # place), those of a predicate of no columns as rows
        return {p: CodedRows(rel.keys, self._coding(p)) if rel.arity else
                set(self._decode(p, rel.keys)) for p, rel in self.counted.items()}

    def _build_rels(self, members: Mapping[str, I64], mids: Mapping[str, I64],
                    depths: Mapping[str, I32], swapped: Mapping[str, list[I64]]) -> None:
        """(initialize) The member arrays with their ids and depths by id, and by swapped
        key, so far."""
        for pred, rel in self.rels.items():
            rel.set_layers(members[pred], depths[pred],
                           alts={SWAPPED: swapped[pred]} if rel.arity == 2 else None,
                           kid=mids[pred])

    # -- sources ---------------------------------------------------------------------------
    def _src_input(self, pred: str, new: bool) -> Source:
        return lambda layout: self._input_view(pred, layout, new)

    def _src_own(self, pred: str, i: int, j: int, t: int, new: bool) -> Source:
        """Own atom i in the semi-naive term of c[t] whose delta atom is j: o[t-1] before
        j, δo[t-1] at j, o[t-2] after j."""
        lo, hi = (0, t - 1) if i < j else (t - 1, t - 1) if i == j else (0, t - 2)
        return lambda layout: self._own_view(pred, layout, lo, hi, new)

    def _own_view(self, pred: str, layout: Layout, lo: int, hi: int,
                  new: bool) -> _View:
        return self.rels[pred].view(layout, lo, hi, new)

    # -- apply ----------------------------------------------------------------------------
    def apply(self, store: RelationStore, deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        self._views = {}
        try:
            return self._apply(store, deltas)
        finally:
            self._views = None  # (never read outside the commit that made them)

    def _apply(self, store: RelationStore, deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        self._counters = {"delta_queries": 0, "rows_gathered": 0}
        self._input_delta = {}
        for pred, d in deltas.items():
            if pred in self.own or pred not in self.input_keys or not d:
                continue
            self._set_delta(pred, d)
        if self.aggregates is not None:
            for pred, d in self.aggregates.apply(store, deltas).items():
                if d:
                    self._set_delta(pred + AGGREGATED, d)
        for name, neg in self.negations.items():
            nd = deltas.get(neg.atom.pred)
            change = negation_change(neg, store[neg.atom.pred], nd) if nd else {}
            if change and name in self.neg_casts:
                change = {nk: w for key, w in change.items()
                          if (nk := self._neg_key(name, key)) is not None}
            if change:
                self._set_delta(name, change)
        if self.counted:
            return self._apply_counted()
        if self.linear is not None and self.fused:
            return self._apply_linear(self.linear)
        self._touched = {p: _Touched() for p in self.rels}
        self._term_depths = {}
        max_birth_old = max((len(r.bhist) - 1 for r in self.rels.values()), default=-1)
        # Δo[t-1], Δo[t-2] and Δδo[t-1] (by relation: keys and weights, in slot order)
        prev: dict[str, tuple[I64, I64]] = {}
        prev2: dict[str, tuple[I64, I64]] = {}
        last: dict[str, tuple[I64, I64]] = {}
        t = ran = skipped = 0
        while True:
            ran += 1
            dct = self._delta_c(t, prev, prev2, last)
            for pred, (k, w) in dct.items():
                self._touch(pred, k, w, t)
            cur: dict[str, tuple[I64, I64]] = {}
            cur_eq: dict[str, tuple[I64, I64]] = {}
            size_t = 0
            for pred, tc in self._touched.items():
                self._decide(self.rels[pred], tc, t)
                idx, w = np.empty(tc.n, np.int64), np.empty(tc.n, np.int64)
                idx_eq, w_eq = np.empty(tc.n, np.int64), np.empty(tc.n, np.int64)
                k, k_eq, came, went = kernels.changed_at(t, tc.n, tc.old, tc.new, idx, w,
                                                         idx_eq, w_eq)
                if k:
                    cur[pred] = (tc.keys[idx[:k]], w[:k])
                if k_eq:
                    cur_eq[pred] = (tc.keys[idx_eq[:k_eq]], w_eq[:k_eq])
                size_t += self.rels[pred].hist_at(t) + came - went
            if not self.recursive_rules:
                break
            if t + 1 > max_birth_old and not size_t:
                break
            prev2, prev, last = prev, cur, cur_eq
            t += 1
            if not last:  # o[t-1] = o[t-2]: maybe nothing changes at t
                after = self._next_active(t, prev)
                if after is None:
                    break
                skipped += after - t
                t = after
        out = self._finish()
        touched = sum(tc.n for tc in self._touched.values())
        self.work = self._work(ran, touched)
        self.work["iterations_skipped"] = skipped
        self._touched, self._term_depths = {}, {}
        self._commit_inputs()
        return out

    def _apply_linear(self, plan: Linear) -> dict[str, Delta]:
        """A commit of a linear binary closure: the inner loop in one compiled call
        (``linear.linear_loop``), called again when an array it writes needs room; then
        the facts it saw first join the sorted parts, and the commit ends as any other."""
        rel = self.rels[plan.pred]
        assert rel.index is not None
        tc = self._linear_tc
        if tc is None:
            tc = _Touched()
            tc.room(LINEAR_ROOM, 4 * LINEAR_ROOM)
            tc.log_room(LINEAR_ROOM)
        tc.n = tc.g_n = 0
        self._touched, self._term_depths = {plan.pred: tc}, {}
        c0k, c0w, q0 = _E64, _E64, 0
        if plan.base in self._input_delta:  # Δc[0]: the base rule's change
            c0k, c0w = self._input_delta[plan.base]
            q0 = 1
            if plan.base_swap:
                c0k = _swap(c0k)
                order = np.argsort(c0k)
                c0k, c0w = c0k[order], c0w[order]
        aj = ao = aw = _E64
        if plan.edge in self._input_delta:  # ΔE by join code
            k, w = self._input_delta[plan.edge]
            aj, ao = (k >> 32, k & LOW) if plan.je == 0 else (k & LOW, k >> 32)
            order = np.argsort(aj, kind="stable")
            aj, ao, aw = aj[order], ao[order], w[order]
        if plan.jp == 0:
            parts = [rel.keys, _E64 if rel.kid is None else rel.kid, rel.ykeys, rel.yid,
                     rel.nkeys, rel.nid]
        else:
            parts = rel.alt(SWAPPED)[:]
        # (E's new version: the loop reads P's old one for ΔE's term)
        eview = self._input_view(plan.edge, natural(2) if plan.je == 0 else SWAPPED, True)
        ek = eview.parts[0][0]
        index = rel.index
        n_ids0 = rel.n_ids
        st = np.zeros(linear.FIELDS, np.int64)
        st[linear.HASH_N] = index.n
        pend_k = pend_w = _E64
        while True:
            code, pend_k, pend_w = linear.linear_loop(
                st, c0k, c0w, q0, aj, ao, aw, parts[0], parts[1], parts[2], parts[3],
                parts[4], parts[5], plan.jp, plan.pfirst,
                ek, eview.pkeys, eview.pdepth, index.tk, index.tv, index.bits, rel.depth,
                rel.ndepth, rel.slot, rel.bstart, rel.blen, rel.pool_t, rel.pool_w, n_ids0,
                rel.hist, len(rel.bhist) - 1, tc.ids, tc.keys, tc.old, tc.new, tc.decided,
                tc.dr, tc.gstart, tc.glen, tc.gnext, tc.r_old, tc.g_t, tc.g_w, tc.log_s,
                tc.log_t, tc.log_w, tc.last_s, tc.last_w, pend_k, pend_w)
            tc.n, tc.g_n = int(st[linear.N]), int(st[linear.G_N])
            index.n = int(st[linear.HASH_N])
            if code == linear.DONE:
                break
            # (twice what this iteration needs: the next ones need more)
            tc.room(2 * int(st[linear.NEED_FACTS]) - tc.n,
                    2 * int(st[linear.NEED_BIRTHS]) - tc.g_n)
            tc.log_room(2 * int(st[linear.NEED_LOG]))
            rel._room(int(st[linear.NEED_IDS]))
            index.reserve(int(st[linear.NEED_HASH]) - index.n)
        fresh = int(st[linear.M_NEW])
        if fresh:  # the facts first seen join the nursery (their ids given, indexed)
            ids = np.arange(n_ids0, n_ids0 + fresh, dtype=np.int64)
            keys = tc.keys[rel.slot[ids]]
            order = np.argsort(keys)
            rel.add_young(keys[order], ids[order])
        logged = int(st[linear.LOG_N])
        self._linear_tc = tc if len(tc.ids) <= LINEAR_KEEP else None
        tc.log = [(tc.log_s[:logged], tc.log_t[:logged], tc.log_w[:logged])]
        self._counters["delta_queries"] += int(st[linear.QUERIES])
        self._counters["rows_gathered"] += int(st[linear.GATHERED])
        out = self._finish()
        self.work = self._work(int(st[linear.RAN]), tc.n)
        self.work["iterations_skipped"] = int(st[linear.SKIPPED])
        self.work["fused_commits"] = 1
        self._touched, self._term_depths = {}, {}
        self._commit_inputs()
        return out

    def _apply_counted(self) -> dict[str, Delta]:
        """A commit of a non-recursive stratum: Δc[0] added to the facts' counts; a fact
        whose count leaves 0 comes, one whose count reaches 0 goes."""
        changes = {}
        out: dict[str, Delta] = {}
        self.last_change = {}
        for pred, (k, w) in self._delta_c(0, {}, {}, {}).items():
            rel = self.counted[pred]
            old, new, at = rel.change(pred, k, w)
            came, went = k[(old == 0) & (new > 0)], k[(old > 0) & (new == 0)]
            self.last_change[pred] = (came, went)
            d: Delta = dict.fromkeys(self._decode(pred, came), 1)
            d.update(dict.fromkeys(self._decode(pred, went), -1))
            if d:
                out[pred] = d
            changes[pred] = (rel, k, old, new, at)
        for pred, rel in self.counted.items():  # (in the stratum's order, as the check ran)
            if pred in out and self.prog.schemas[pred].functional:
                rel, k, old, new, _ = changes[pred]
                self._check_counted(pred, rel, k, old, new, out[pred])
        for rel, k, old, new, at in changes.values():
            rel.update(k, old, new, at)
        self.work = self._work(1, sum(len(c[1]) for c in changes.values()))
        self.work["iterations_skipped"] = 0
        self._commit_inputs()
        return out

    def _check_counted(self, pred: str, rel: "_Counts", k: I64, old: I64, new: I64,
                       d: Delta) -> None:
        """A key of functional ``pred`` with two values in the new version (the old facts
        of counts ``old`` at keys ``k`` counting ``new``) is DL302
        (``_Counts.check_functional``); raised before the state changes."""
        try:
            rel.check_functional(pred, self._coding(pred), k[(old == 0) & (new > 0)],
                                 k[(old > 0) & (new == 0)], d)
        except DataError:
            self._input_delta = {}  # (the inputs keep their old versions)
            raise

    def _delta_c(self, t: int, prev: Mapping[str, tuple[I64, I64]],
                 prev2: Mapping[str, tuple[I64, I64]], last: Mapping[str, tuple[I64, I64]]
                 ) -> dict[str, tuple[I64, I64]]:
        """Δc[t]: for every product term of c[t], the sum over its factors p of (new
        versions before p) · Δ_p · (old versions after p)."""
        out: dict[str, list[tuple[I64, I64]]] = {}
        rules = self.base_rules if t == 0 else self.recursive_rules
        for rule in rules:
            semi: list[int | None] = [None] if t == 0 else list(rule.own_atoms)
            n_atoms = len(rule.atoms)
            for j in semi:
                for p in range(n_atoms + len(rule.negs)):
                    if p >= n_atoms:  # the factor 1 - N': its change is -ΔN'
                        delta = self._input_delta.get(rule.neg_names[p - n_atoms])
                        if delta is not None:
                            delta = (delta[0], -delta[1])
                    elif rule.atoms[p].pred not in self.own:
                        delta = self._input_delta.get(rule.atoms[p].pred)
                    else:
                        assert j is not None
                        delta = (prev if p < j else prev2 if p > j else last).get(
                            rule.atoms[p].pred)
                    if delta is None or not len(delta[0]):
                        continue
                    srcs: list[Source] = []
                    for q, b in enumerate(rule.atoms):
                        if b.pred not in self.own:
                            srcs.append(self._src_input(b.pred, q < p))
                        else:
                            assert j is not None
                            srcs.append(self._src_own(b.pred, q, j, t, q < p))
                    srcs += [self._src_input(name, n_atoms + k < p)
                             for k, name in enumerate(rule.neg_names)]
                    self._collect(out, rule, self._join(rule, p, delta[0], delta[1], srcs))
        return self._zsets(out)

    def _next_active(self, t: int, prev: Mapping[str, tuple[I64, I64]]) -> int | None:
        """When Δo[t-1] = Δo[t-2] (no membership changed at depth t-1): the first
        iteration t' ≥ t whose Δc or ↑↑H may change anything (None: none will), so the
        iterations before it are skipped. Every term of Δc[t'] reads own atom j's facts of
        depth t' - 1 (δo[t'-1], its semi-naive factor); a term whose change is Δδo[t'-1]
        is empty until something changes; one whose change is a cumulative own Δo (a
        nonlinear rule) reads facts at every depth: no skipping. A term whose change is an
        input's reads only the facts of j that agree with that change on their shared
        variables: their old depths (``_depths_of``) give the iterations it may fill; the
        touched facts' new depths differ from their old ones only where Δo changes (not
        skipped). A touched fact changes by itself at its old depth and, undecided, at an
        old birth (``kernels.next_event``)."""
        best = int(NONE)
        for tc in self._touched.values():
            best = min(best, int(kernels.next_event(t, tc.n, tc.old, tc.decided, tc.gstart,
                                                    tc.glen, tc.gnext, tc.g_t)))
        for r, rule in enumerate(self.recursive_rules):
            n_atoms = len(rule.atoms)
            for j in rule.own_atoms:
                for p in range(n_atoms + len(rule.negs)):
                    if best <= t:
                        return t
                    if p == j:
                        continue
                    if p < n_atoms and rule.atoms[p].pred in self.own:
                        if rule.atoms[p].pred in prev:
                            return t
                        continue
                    name = rule.atoms[p].pred if p < n_atoms else rule.neg_names[p - n_atoms]
                    if name not in self._input_delta:
                        continue
                    depths = self._depths_of(r, rule, j, p)
                    at = int(np.searchsorted(depths, t - 1))
                    if at < len(depths):
                        best = min(best, int(depths[at]) + 1)
        return None if best == NONE else best

    def _depths_of(self, r: int, rule: _CRule, j: int, p: int) -> I32:
        """(``_next_active``) The distinct old depths of the facts of own atom j that
        agree with factor p's change (an input's, or a negation's key set's) on their
        shared variables (every depth held when they share none, or when no layout the
        joins keep has those columns first); kept for the commit."""
        got = self._term_depths.get((r, j, p))
        if got is not None:
            return got
        n_atoms = len(rule.atoms)
        if p < n_atoms:
            name, seed_vars = rule.atoms[p].pred, rule.atoms[p].vars
        else:
            name, seed_vars = rule.neg_names[p - n_atoms], rule.negs[p - n_atoms].key_vars
        atom = rule.atoms[j]
        rel = self.rels[atom.pred]
        fixed = tuple(i for i, v in enumerate(atom.vars) if v in seed_vars)
        layout = (fixed, tuple(i for i in range(len(atom.vars)) if i not in fixed))
        if not fixed or (layout != natural(rel.arity) and layout not in rel.alts):
            # (no layout a join keeps for this lookup: not one made for it alone)
            got = np.flatnonzero(rel.hist).astype(np.int32)
        else:
            keys = self._input_delta[name][0]
            cols = dict(zip(seed_vars, self.packing.unpack(self._natural(name), keys),
                            strict=True))
            first = _distinct(self.packing.group([cols[atom.vars[i]] for i in fixed],
                                                 len(keys), known=True))
            view = rel.view(layout, 0, int(NONE) - 1)
            (k0, i0), (k1, i1), (k2, i2) = view.parts
            got = _distinct(kernels.view_depths(
                first, k0, _E64 if i0 is None else i0, k1, _E64 if i1 is None else i1,
                k2, _E64 if i2 is None else i2, rel.depth))
        self._term_depths[(r, j, p)] = got
        return got

    def _touch(self, pred: str, k: I64, w: I64, t: int) -> None:
        """Add Δc[t] of ``pred`` (distinct sorted keys, as ``_zsets`` makes them) to the
        touched facts."""
        tc = self._touched[pred]
        rel = self.rels[pred]
        ids = rel.find(k)
        never = ids < 0
        if never.any():  # facts never seen: ids in the young part (depth NONE)
            ids[never] = rel.add_young(k[never])
        tc.room(len(ids), int(rel.blen[ids].sum()))
        slots = np.empty(len(ids), np.int64)
        tc.n, tc.g_n = kernels.touch(
            ids, k, w, t, rel.slot, rel.depth, rel.ndepth, rel.bstart, rel.blen, rel.pool_t,
            rel.pool_w, tc.n, tc.ids, tc.keys, tc.old, tc.new, tc.decided, tc.dr, tc.gstart,
            tc.glen, tc.gnext, tc.r_old, tc.g_n, tc.g_t, tc.g_w, slots)
        tc.log.append((slots, np.full(len(k), t, np.int32), w))

    @staticmethod
    def _decide(rel: _Rel, tc: _Touched, t: int) -> None:
        """↑↑H at iteration t: the undecided facts with r_old[t] + Δr[t] > 0 are in
        o_new[t] (depth t)."""
        kernels.decide(t, tc.n, tc.ids, tc.new, tc.decided, tc.dr, tc.r_old, tc.gstart,
                       tc.glen, tc.gnext, tc.g_t, tc.g_w, rel.ndepth)

    def _finish(self) -> dict[str, Delta]:
        """The effective deltas; then births, depths and member arrays change."""
        out: dict[str, Delta] = {}
        for pred, tc in self._touched.items():
            if not tc.n:
                continue
            old, new, keys = tc.old[: tc.n], tc.new[: tc.n], tc.keys[: tc.n]
            ins = (old == NONE) & (new != NONE)
            era = (old != NONE) & (new == NONE)
            d: Delta = {}
            if ins.any():
                d.update(dict.fromkeys(self._decode(pred, keys[ins]), 1))
            if era.any():
                d.update(dict.fromkeys(self._decode(pred, keys[era]), -1))
            if d:
                out[pred] = d
        for pred, tc in self._touched.items():
            if pred in out and self.prog.schemas[pred].functional:
                self._check_functional(pred, tc, out[pred])
        for pred, tc in self._touched.items():
            if tc.n:
                self._update(self.rels[pred], tc)
        return out

    def _check_functional(self, pred: str, tc: _Touched, d: Delta) -> None:
        """A key of functional ``pred`` with two values in the new version is DL302 (as
        ``deltalog.engine.heads.check_functional``); the commit is undone first."""
        rel = self.rels[pred]
        k = self.prog.schemas[pred].key_arity
        new, keys = tc.new[: tc.n], tc.keys[: tc.n]
        came = keys[(tc.old[: tc.n] == NONE) & (new != NONE)]
        if not len(came):
            return
        cols = self.packing.unpack(natural(rel.arity), came)
        layout = (tuple(range(k)), tuple(range(k, rel.arity)))
        view = rel.view(layout, 0, int(NONE) - 1, new=True)  # (first: it codes its rows' pairs)
        own, _, _ = view.expand(self.packing.group(cols[:k], len(came), known=True))
        if not (np.bincount(own, minlength=len(came)) > 1).any():
            return
        old = rel.view(layout, 0, int(NONE) - 1)

        def old_value(key: Row) -> Row | None:
            """The key's row in the old version (the key of an inserted row)."""
            columns = self.prog.schemas[pred].columns[:k]
            kc = [self.codes[c.type].find([v]) for v, c in zip(key, columns, strict=True)]
            at, tail, _ = old.expand(self.packing.group(kc, 1, known=True))
            if not len(at):
                return None
            value = self.packing.ungroup(tail, rel.arity - k)
            return self._decode(pred, self.packing.pack(natural(rel.arity), [*kc, *value], 1))[0]

        try:
            change_conflict(pred, k, d, old_value)
        except DataError:
            self._undo()
            raise
        raise AssertionError(f"two values for one key of {pred}, not found again")

    def _undo(self) -> None:
        """Drop the commit under way: the touched facts' new depths and slots go (facts it
        saw first stay as tombstones), and the inputs keep their old versions."""
        for pred, tc in self._touched.items():
            ids = tc.ids[: tc.n]
            rel = self.rels[pred]
            rel.ndepth[ids] = rel.depth[ids]
            rel.slot[ids] = -1
        self._touched, self._term_depths = {}, {}
        self._input_delta = {}

    @staticmethod
    def _update(rel: _Rel, tc: _Touched) -> None:
        """Depths, births and histograms of the touched facts become the new state
        (``kernels.commit_births``, again after the pool makes room). A fact that leaves
        stays as a tombstone (depth NONE, no births)."""
        n = tc.n
        if len(tc.log) == 1:
            log_s, log_t, log_w = tc.log[0]
        else:
            log_s = np.concatenate([e[0] for e in tc.log])
            log_t = np.concatenate([e[1] for e in tc.log])
            log_w = np.concatenate([e[2] for e in tc.log])
        tc.births_room(n, tc.g_n + len(log_s))
        while True:
            rel.hist, rel.bhist, outcome, end, live = kernels.commit_births(
                n, tc.ids, tc.old, tc.new, tc.gstart, tc.glen, tc.g_t, tc.g_w, tc.g_n,
                log_s, log_t, log_w, tc.nb_start, tc.nb_len, tc.nb_t, tc.nb_w, rel.hist,
                rel.bhist, rel.depth, rel.slot, rel.bstart, rel.blen, rel.pool_t,
                rel.pool_w, rel.pool_n)
            if outcome == kernels.BIRTHS_DONE:
                break
            if outcome != kernels.BIRTHS_ROOM:
                raise AssertionError("negative derivation count" if outcome ==
                                     kernels.BIRTHS_NEGATIVE else
                                     "births and membership disagree")
            rel.pool_room(int(end))
        rel.pool_n = int(end)
        rel.live += int(live)
        dead = rel.n_ids - int(rel.hist.sum())
        if dead > max(PURGE_MIN, rel.n_ids // 4) or len(rel.ykeys) + len(rel.nkeys) > max(
                YOUNG_MIN, len(rel.keys) // 8):
            rel.compact_facts()

    def _commit_inputs(self) -> None:
        """The new versions of the inputs become the old ones of the next commit: the
        change goes into the input's patch (O(patch + change)), and the sorted keys are
        written anew only when the patch passes ``PATCH_MAX`` keys (so a saved state
        keeps its input arrays, and a save writes the patch)."""
        for pred in self._input_delta:
            by, patches = self.input_keys[pred], self.input_patch[pred]
            for layout, keys in by.items():
                # the new version's patch (the commit's view of it, made once), less
                # what the keys say
                view = self._input_view(pred, layout, True)
                pk, pd = kernels.trim_patch(keys, view.pkeys, view.pdepth)
                if len(pk) > PATCH_MAX:
                    pos, hit = _find(keys, pk[pd == NONE])
                    keys = np.delete(keys, pos[hit])
                    came = pk[pd == 0]
                    by[layout] = np.insert(keys, np.searchsorted(keys, came), came)
                    pk, pd = _E64, _E32
                patches[layout] = (pk, pd)
        self._input_delta = {}

    def _work(self, iterations: int, facts: int) -> dict[str, int]:
        """This load's or commit's counters (with those of the aggregate rules')."""
        work = dict(self.aggregates.work) if self.aggregates is not None else {}
        for name, n in (("delta_queries", self._counters.get("delta_queries", 0)),
                        ("rows_gathered", self._counters.get("rows_gathered", 0)),
                        ("inner_iterations", iterations), ("facts_touched", facts),
                        ("columnar_strata", 1)):
            work[name] = work.get(name, 0) + n
        for name in ("first_round_joins", "first_round_steps"):  # (a load's, when any)
            if name in self._counters:
                work[name] = work.get(name, 0) + self._counters[name]
        return work
