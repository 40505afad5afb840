"""Aggregate rules on arrays (Veldhuizen 2014, §2.3): a stratum of aggregate rules kept by
the columnar kernel and per-group arrays, not per-group Python objects.

Each rule ``p[k...] = r <- agg<<r = f(a)>> body`` is split in two:

- its *assignment relation* ``p@asg(x...)``: the distinct satisfying assignments of the
  body, one column per body variable (the key's variables first, then ``a``), a derived
  relation of a non-recursive columnar stratum (``ColumnarStratum``) that keeps it as
  sorted packed keys with a derivation count each and hands over, at every commit, the
  keys of the assignments that came and went;
- its *groups*: one slot per distinct key (the key variables' codes as one group code,
  ``_Packing.group``; a hash from group code to slot), and by slot arrays of the
  aggregate's state, updated from those keys without decoding them:

  - ``count`` (§2.3.1): the number of assignments;
  - ``sum``, ``total`` (§2.3.2, §2.3.4): an exact sum. int64 summands add into a 128-bit
    accumulator per slot (two int64 arrays, compiled loop), exact for 2^64 summands;
    float summands and ints beyond int64 into an exact integer in units of 2^-1074 (the
    same as ``deltalog.engine.exact_sum.ExactSum``), one per slot that has any, in a
    dict. The result is the same correctly rounded value whatever the order of changes;
  - ``min``, ``max`` (§2.3.3): the multiplicity of each (slot, value code) pair (a
    ``_Counts``: sorted keys in parts, tombstones), and the best value's code by slot. An
    arriving value is compared with the best; when the best's last assignment leaves, the
    group's distinct values (a range of the pairs' keys) are read again. That read costs
    the group's distinct values where the paper's scan tree costs O(log n): it is one
    contiguous range of keys, decoded only for the group whose extreme left.

A commit's work is the changed assignments (vectorized) and, in Python, the groups they
change (old and new result rows, which the store and the strata above take as rows).
Slots are never freed: a group that empties keeps its slot (count 0), as codes are kept.
A body of no variable has one assignment at most, the empty row (p@asg of no column).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from deltalog.engine.analysis.program import AnalyzedProgram, RelationSchema, Stratum
from deltalog.engine.dbsp.columnar import (
    LOW,
    TYPES,
    CodedRows,
    ColumnarStratum,
    SharedCoding,
    _Counts,
    _distinct,
    _grown,
    _Hash,
    _RowCoding,
    _uncast,
    _var_types,
    columnar_reason,
    natural,
)
from deltalog.engine.errors import DataError
from deltalog.engine.exact_sum import SCALE, ExactSum, group_out_of_range
from deltalog.engine.heads import body_vars
from deltalog.engine.join.plan import prepare
from deltalog.engine.semantics import coerce
from deltalog.engine.storage import Delta, RelationStore
from deltalog.engine.syntax.ast import Atom, Column, Const, Rule, Var
from deltalog.engine.values import Row

I64 = NDArray[np.int64]
ASSIGNED = "@asg"  # p's assignment relation: the input-free predicate p@asg
_E64 = np.zeros(0, np.int64)
_TWO64 = 1 << 64


@njit(cache=True, nogil=True)
def add128(slots, values, weights, hi, lo):  # type: ignore[no-untyped-def]
    """Add ``values[i]`` (int64) times ``weights[i]`` (+1 or -1) to the 128-bit sum of
    slot ``slots[i]``: hi * 2^64 + lo read unsigned."""
    for i in range(len(slots)):
        s = slots[i]
        v = values[i]
        u = np.uint64(lo[s])
        x = np.uint64(v)
        neg = np.int64(-1) if v < 0 else np.int64(0)
        if weights[i] > 0:
            r = u + x
            hi[s] += (np.int64(1) if r < u else np.int64(0)) + neg
        else:
            r = u - x
            hi[s] -= (np.int64(1) if u < x else np.int64(0)) + neg
        lo[s] = np.int64(r)


def aggregates_reason(prog: AnalyzedProgram, stratum: Stratum) -> str | None:
    """Why the aggregate rules of ``stratum`` (all its rules, non-recursive) are not kept
    on arrays (None: they are)."""
    if stratum.recursive or any(r.aggregate is None for r in stratum.rules):
        return "a stratum of aggregate rules only is kept on arrays"
    heads = [r.head.pred for r in stratum.rules]
    if len(set(heads)) < len(heads):
        return "two aggregate rules define one predicate"
    if any(prog.facts.get(p) for p in heads):
        return "the program states facts of an aggregate's predicate"
    asg_prog, asg_stratum, _ = _assignments(prog, stratum)
    for rule, asg in zip(stratum.rules, asg_stratum.rules, strict=True):
        reason = _groups_reason(prog, rule, asg_prog.schemas[asg.head.pred])
        if reason is not None:
            return reason
    reason = columnar_reason(asg_prog, asg_stratum)
    return None if reason is None else f"its assignments are not columnar: {reason}"


def groups_reason(prog: AnalyzedProgram, rule: Rule) -> str | None:
    """Why the groups of aggregate rule ``rule`` cannot be kept on arrays
    (``GroupArrays``) by a maintainer that counts the rows they give (a sensitivity
    stratum's support: two groups whose keys become one, an int key beyond 2^53 in a
    float column, give that key's row twice, or two values for it, DL302); None: they
    can."""
    asg_prog, asg_stratum, _ = _assignments(
        prog, Stratum((rule.head.pred,), (rule,), recursive=False))
    return _groups_reason(prog, rule, asg_prog.schemas[asg_stratum.rules[0].head.pred],
                          counted=True)


def _groups_reason(prog: AnalyzedProgram, rule: Rule, asg: RelationSchema,
                   counted: bool = False) -> str | None:
    if any(c.type not in TYPES for c in prog.schemas[rule.head.pred].columns):
        return f"'{rule.head.pred}' has a column that is not an int, float or string"
    types = {c.name: c.type for c in asg.columns}
    if any(t not in TYPES for t in types.values()):
        return f"rule at {rule.loc}: a variable of its body has no int, float or string type"
    if counted:
        return None
    for term, col in zip(rule.head.args[:-1], prog.schemas[rule.head.pred].columns,
                         strict=False):
        if isinstance(term, Var) and types.get(term.name) != col.type:
            # (two groups, ints beyond 2^53, would share one float key: DL302)
            return f"rule at {rule.loc}: its key {term.name} is an int in a float column"
    return None


def _assigned(rules: "tuple[Rule, ...] | list[Rule]", j: int) -> str:
    """The name of rule j's assignment relation: p@asg, or p#j@asg where another of
    ``rules`` defines p too (a sensitivity stratum's)."""
    pred = rules[j].head.pred
    if sum(r.head.pred == pred for r in rules) == 1:
        return pred + ASSIGNED
    return f"{pred}#{j}{ASSIGNED}"


def _assignments(prog: AnalyzedProgram, stratum: Stratum
                 ) -> tuple[AnalyzedProgram, Stratum, list[tuple[int, int | None]]]:
    """``prog`` with a schema for each rule's assignment relation p@asg, the stratum of
    their rules (p@asg(x...) :- body), and by rule the number of key variables and the
    position of the aggregate's argument in p@asg (None: count)."""
    schemas = dict(prog.schemas)
    rules: list[Rule] = []
    shape: list[tuple[int, int | None]] = []
    for j, rule in enumerate(stratum.rules):
        agg = rule.aggregate
        assert agg is not None
        name = _assigned(stratum.rules, j)
        # (a wildcard is a variable of the assignments: in the head, as the probe's, never
        # dropped as the join drops one of a rule without an aggregate)
        bound = sorted({a.name for item in rule.body if isinstance(item, Atom)
                        for a in item.args if isinstance(a, Var)})
        probe = Rule(Atom(name, tuple(Var(v) for v in bound)), rule.body, None, rule.loc,
                     rule.casts)
        types = _var_types(prog, prepare(_uncast(prog, probe)))
        keys = list(dict.fromkeys(a.name for a in rule.head.args[:-1] if isinstance(a, Var)))
        arg = [] if agg.arg is None or agg.arg.name in keys else [agg.arg.name]
        rest = [v for v in body_vars(rule) if v in types and v not in keys and v not in arg]
        order = keys + arg + rest
        schemas[name] = RelationSchema(
            name, tuple(Column(v, types.get(v, "?")) for v in order), declared=False)
        rules.append(Rule(Atom(name, tuple(Var(v) for v in order)), rule.body, None,
                          rule.loc, rule.casts))
        shape.append((len(keys), None if agg.arg is None else order.index(agg.arg.name)))
    preds = tuple(r.head.pred for r in rules)
    return replace(prog, schemas=schemas), Stratum(preds, tuple(rules), recursive=False), shape


@dataclass
class _Groups:
    """The groups of one aggregate rule, by slot (see the module's docstring)."""

    func: str
    vtype: str  # the aggregate argument's type ("int" for count)
    float_result: bool
    index: _Hash = field(default_factory=lambda: _Hash(_E64, _E64))
    size: int = 0  # slots used
    gcode: I64 = field(default_factory=lambda: _E64)  # the group code of each slot
    n: I64 = field(default_factory=lambda: _E64)  # assignments
    hi: I64 = field(default_factory=lambda: _E64)  # sum: int64 summands, high word
    lo: I64 = field(default_factory=lambda: _E64)  # ... low word (unsigned)
    # sum: by slot, [float summands, the other summands' exact sum in units of 2^-1074]
    wide: dict[int, list[int]] = field(default_factory=dict)
    best: I64 = field(default_factory=lambda: _E64)  # min/max: the best value's code
    vals: _Counts = field(default_factory=lambda: _Counts(2))  # (slot, value code) counts

    def slots(self, g: I64) -> I64:
        """The slots of group codes ``g``, new groups given slots (slots in the order of
        their codes when there are none yet and ``g`` is sorted, as a load's group codes
        are when the key is one variable: the high half of the assignments' sorted keys;
        then no lookup)."""
        if not self.size and len(g) and not (g[1:] < g[:-1]).any():
            edge = np.empty(len(g), np.bool_)
            edge[0] = True
            np.not_equal(g[1:], g[:-1], out=edge[1:])
            self._grow(g[edge])
            return np.cumsum(edge) - 1
        got = self.index.get(g)
        new = got < 0
        if new.any():
            self._grow(_distinct(g[new]))
            got[new] = self.index.get(g[new])
        return got

    def _grow(self, fresh: I64) -> None:
        """Slots for group codes ``fresh`` (distinct, none held), in their order."""
        n0, n1 = self.size, self.size + len(fresh)
        if n1 >= 2**31:
            raise ValueError("not supported: more than 2^31 groups of one aggregate")
        self.index.reserve(len(fresh))
        self.index.insert(fresh, np.arange(n0, n1, dtype=np.int64))
        self.gcode = _grown(self.gcode, n1, 0)
        self.gcode[n0:n1] = fresh
        for name, fill in (("n", 0), ("hi", 0), ("lo", 0), ("best", -1)):
            setattr(self, name, _grown(getattr(self, name), n1, fill))
        self.size = n1


def _coerced(col: Any, typ: str) -> list[Any]:
    """A column's values as ``coerce`` stores them in a column of type ``typ`` (a float
    column: ints widened, -0.0 made 0.0; others as they are), as a list."""
    if typ != "float":
        return col.tolist() if isinstance(col, np.ndarray) else list(col)
    if isinstance(col, np.ndarray) and col.dtype.kind in "if":
        return (col.astype(np.float64) + 0.0).tolist()  # (int64 to float64 rounds as float())
    return [coerce(v, typ) for v in col]


class GroupArrays:
    """The groups of aggregate rules by slot (``_Groups``), fed the keys of their
    assignments (rows of each rule's p@asg, natural keys in the shared coding): what
    ``ColumnarAggregates`` keeps beside its assignments' columnar stratum, and what a
    sensitivity stratum (``deltalog.engine.ivm.stratum``) keeps for its aggregate rules,
    whose assignments are the units its change oracle finds."""

    def __init__(self, prog: AnalyzedProgram, stratum: Stratum, coding: SharedCoding):
        """The rules of ``stratum``, aggregate rules all (``aggregates_reason``'s, or
        ``rule_reason``'s for each)."""
        self.prog = prog
        self.codes, self.packing = coding.codes, coding.packing
        asg_prog, _, shape = _assignments(prog, stratum)
        self.asg_prog = asg_prog
        self.rules = list(stratum.rules)
        self.shape = shape
        self.groups: list[_Groups] = []
        for j, (rule, (_, vpos)) in enumerate(zip(self.rules, shape, strict=True)):
            agg = rule.aggregate
            assert agg is not None
            vtype = "int" if vpos is None else \
                asg_prog.schemas[_assigned(self.rules, j)].columns[vpos].type
            self.groups.append(_Groups(
                agg.func, vtype, prog.schemas[rule.head.pred].columns[-1].type == "float"))

    def _asg(self, i: int) -> RelationSchema:
        """The schema of rule i's assignment relation."""
        return self.asg_prog.schemas[_assigned(self.rules, i)]

    def assignment_vars(self, i: int) -> list[str]:
        """The variables of rule i's assignments, in their columns' order."""
        schema = self._asg(i)
        return [c.name for c in schema.columns]

    def assignment_coding(self, i: int) -> _RowCoding:
        """The coding of rule i's assignments (natural keys)."""
        schema = self._asg(i)
        return _RowCoding(tuple(c.type for c in schema.columns), self.codes, self.packing)

    def change(self, i: int, keys: I64, w: I64) -> Delta:
        """Assignments ``keys`` of rule i come (w = 1) or go (w = -1): the head rows that
        change (a group's old row -1, its new one +1)."""
        slots = _distinct(self._slots(i, keys))
        old = self._rows(i, slots)
        self.add(i, keys, w)
        d: Delta = {}
        for before, after in zip(old, self._rows(i, slots), strict=True):
            if before != after:
                if before is not None:
                    d[before] = d.get(before, 0) - 1
                if after is not None:
                    d[after] = d.get(after, 0) + 1
        return {r: c for r, c in d.items() if c}

    # -- groups ----------------------------------------------------------------------------
    def _columns(self, i: int, keys: I64) -> list[I64]:
        """The codes of assignment keys ``keys`` of rule i, by column."""
        arity = self._asg(i).arity
        return self.packing.unpack(natural(arity), keys)

    def _slots(self, i: int, keys: I64, cols: list[I64] | None = None) -> I64:
        if cols is None:
            cols = self._columns(i, keys)
        return self.groups[i].slots(self.packing.group(cols[:self.shape[i][0]], len(keys)))

    def add(self, i: int, keys: I64, w: I64) -> I64:
        """Assignments ``keys`` of rule i come (w = 1) or go (w = -1); their slots."""
        gr = self.groups[i]
        cols = self._columns(i, keys)
        slots = self._slots(i, keys, cols)
        np.add.at(gr.n, slots, w)
        vpos = self.shape[i][1]
        if vpos is None or gr.func == "count":
            return slots
        codes = cols[vpos]
        if gr.func in ("sum", "total"):
            self._add_sums(gr, slots, codes, w)
        else:
            self._add_extremes(gr, slots, codes, w)
        return slots

    def _add_sums(self, gr: _Groups, slots: I64, codes: I64, w: I64) -> None:
        if gr.vtype == "float":
            self._add_floats(gr, slots, self.codes["float"].floats(codes), w)
            return
        values, big = self.codes["int"].ints(codes)
        small = ~big
        add128(slots[small], values[small], w[small], gr.hi, gr.lo)
        at = np.flatnonzero(big)
        for s, v, wt in zip(slots[at].tolist(), self.codes["int"].decode(codes[at]),
                            w[at].tolist(), strict=True):
            self._widen(gr, s, 0, wt * v * SCALE)

    def _add_floats(self, gr: _Groups, slots: I64, values: NDArray[np.float64],
                    w: I64) -> None:
        """Float summands into their slots' exact sums (units of 2^-1074): each value is
        m * 2^shift units (m below 2^53: ``frexp``); a slot's summands within 2^9 of its
        least shift are added as int64s into a 128-bit sum (compiled), then scaled once
        per slot; the rest one at a time."""
        frac, exp = np.frexp(values)
        m = (frac * 2.0**53).astype(np.int64)
        shift = exp.astype(np.int64) + (1074 - 53)
        sub = shift < 0  # (subnormals: m is a multiple of 2^-shift)
        m[sub] >>= -shift[sub]
        shift[sub] = 0
        uniq, local = np.unique(slots, return_inverse=True)
        local = local.reshape(-1)
        least = np.full(len(uniq), 1 << 20, np.int64)
        np.minimum.at(least, local, shift)
        d = shift - least[local]
        near = d <= 9
        hi, lo = np.zeros(len(uniq), np.int64), np.zeros(len(uniq), np.int64)
        add128(local[near], m[near] << d[near], w[near], hi, lo)
        floats = np.zeros(len(uniq), np.int64)
        np.add.at(floats, local, w)
        for s, h, low, k, n in zip(uniq.tolist(), hi.tolist(), lo.tolist(), least.tolist(),
                                   floats.tolist(), strict=True):
            self._widen(gr, s, n, (h * _TWO64 + low % _TWO64) << k)
        far = np.flatnonzero(~near)
        for s, mv, k, wt in zip(slots[far].tolist(), m[far].tolist(), shift[far].tolist(),
                                w[far].tolist(), strict=True):
            self._widen(gr, s, 0, wt * (mv << k))

    @staticmethod
    def _widen(gr: _Groups, s: int, floats: int, scaled: int) -> None:
        """Add to slot s's exact sum: float summands, and units of 2^-1074."""
        acc = gr.wide.get(s)
        if acc is None:
            acc = gr.wide[s] = [0, 0]
        acc[0] += floats
        acc[1] += scaled
        if not acc[0] and not acc[1]:
            del gr.wide[s]

    def _add_extremes(self, gr: _Groups, slots: I64, codes: I64, w: I64) -> None:
        pairs = (slots << 32) | codes
        order = np.argsort(pairs, kind="stable")
        k, start = np.unique(pairs[order], return_index=True)
        dw = np.add.reduceat(w[order], start) if len(k) else _E64
        old, at = gr.vals.lookup(k)
        new = old + dw
        gr.vals.update(k, old, new, at)
        ks, kc = k >> 32, k & LOW
        touched = _distinct(ks)
        gone = (old > 0) & (new == 0)
        # a group whose best value's last assignment left reads its values again; the
        # others choose between their best and the values that came
        lost = _distinct(ks[gone & (gr.best[ks] == kc)])
        kept = touched[(gr.best[touched] >= 0) & ~np.isin(touched, lost)]
        came = (old == 0) & (new > 0)
        held = gr.vals.with_high(lost) if len(lost) else _E64
        cand_s = np.concatenate([ks[came], kept, held >> 32])
        cand_c = np.concatenate([kc[came], gr.best[kept], held & LOW])
        gr.best[touched] = -1
        if len(cand_s):
            best_s, best_c = self._extremes(gr, cand_s, cand_c)
            gr.best[best_s] = best_c

    def _extremes(self, gr: _Groups, slots: I64, codes: I64) -> tuple[I64, I64]:
        """Each slot's least (min) or greatest (max) value among candidates (slot, code):
        the slots, and the value codes. Each code's rank in value order among the
        candidates' distinct values, then the least or greatest rank of each slot's run
        (the candidates sorted by slot: a load's are already)."""
        top = int(codes.max())
        if top < 4 * len(codes) + 1024:  # (codes dense among them: a table, no sort)
            seen = np.zeros(top + 1, np.bool_)
            seen[codes] = True
            uniq = np.flatnonzero(seen)
            at = np.empty(top + 1, np.int64)
            at[uniq] = np.arange(len(uniq))
            pos = at[codes]
        else:
            uniq, pos = np.unique(codes, return_inverse=True)
            pos = pos.reshape(-1)
        by_value = self._value_order(gr.vtype, uniq)
        rank = np.empty(len(uniq), np.int64)
        rank[by_value] = np.arange(len(uniq))
        r = rank[pos]
        if (slots[1:] < slots[:-1]).any():
            order = np.argsort((slots << 32) | r, kind="stable")
            slots, r = slots[order], r[order]
        starts = np.flatnonzero(np.concatenate([[True], slots[1:] != slots[:-1]]))
        best = (np.minimum if gr.func == "min" else np.maximum).reduceat(r, starts)
        return slots[starts], uniq[by_value[best]]

    def _value_order(self, vtype: str, codes: I64) -> I64:
        """The positions of distinct codes ``codes`` in the order of their values."""
        if vtype == "float":
            return np.argsort(self.codes["float"].floats(codes), kind="stable")
        if vtype == "int":
            values, big = self.codes["int"].ints(codes)
            if not big.any():
                return np.argsort(values, kind="stable")
        values_list = self.codes[vtype].decode(codes)
        return np.array(sorted(range(len(codes)), key=values_list.__getitem__), np.int64)

    def _result(self, i: int, s: int) -> Any:
        """The aggregate of slot s of rule i (None: the group is empty)."""
        gr = self.groups[i]
        if gr.n[s] <= 0:
            return None
        if gr.func == "count":
            return int(gr.n[s])
        if gr.func in ("min", "max"):
            return self.codes[gr.vtype].decode(gr.best[s:s + 1])[0]
        acc = ExactSum()
        floats, scaled = gr.wide.get(s, (0, 0))
        acc.floats = floats
        acc.scaled = scaled + (int(gr.hi[s]) * _TWO64 + int(gr.lo[s]) % _TWO64) * SCALE
        try:
            return acc.value(gr.func == "total" or gr.float_result)
        except DataError as err:
            raise group_out_of_range(err, self.rules[i].head.pred, self._key(i, s)) from None

    def _key(self, i: int, s: int) -> Row:
        """The head's key of slot s of rule i (its terms, before the columns' types)."""
        rule, nk = self.rules[i], self.shape[i][0]
        schema = self._asg(i)
        codes = self.packing.ungroup(self.groups[i].gcode[s:s + 1], nk)
        values = {schema.columns[j].name: self.codes[schema.columns[j].type].decode(c)[0]
                  for j, c in enumerate(codes)}
        return tuple(values[t.name] if isinstance(t, Var) else t.value
                     for t in rule.head.args[:-1] if isinstance(t, Var | Const))

    def _rows(self, i: int, slots: I64) -> list[Row | None]:
        """The head's row of each of ``slots`` (None: the group is empty)."""
        nonempty = self.groups[i].n[slots] > 0
        cols = self.head_columns(i, slots[nonempty])
        types = [c.type for c in self.prog.schemas[self.rules[i].head.pred].columns]
        lists = [_coerced(c, t) for c, t in zip(cols, types, strict=True)]
        out: list[Row | None] = [None] * len(slots)
        for at, row in zip(np.flatnonzero(nonempty).tolist(), zip(*lists, strict=True),
                           strict=True):
            out[at] = row
        return out

    def _coded(self, i: int, slots: I64) -> CodedRows:
        """The rows of the non-empty groups among ``slots`` of rule i, coded as the store
        keeps a columnar stratum's relation (no Python row made, but for the results of
        sums that are not one int64 each)."""
        schema = self.prog.schemas[self.rules[i].head.pred]
        cols = self.head_columns(i, slots[self.groups[i].n[slots] > 0])
        coding = _RowCoding(tuple(c.type for c in schema.columns), self.codes, self.packing)
        return CodedRows(_distinct(coding.encode_columns(cols)), coding)

    def head_columns(self, i: int, slots: I64) -> list[Any]:
        """The head's columns for non-empty groups ``slots`` of rule i: arrays, or lists
        (strings, ints beyond int64, constants), in the variables' types."""
        rule, gr, nk = self.rules[i], self.groups[i], self.shape[i][0]
        schema = self.prog.schemas[rule.head.pred]
        asg = self._asg(i)
        codes = self.packing.ungroup(gr.gcode[slots], nk)
        by_var = {asg.columns[j].name: self._values(asg.columns[j].type, c)
                  for j, c in enumerate(codes)}
        cols: list[Any] = []
        for term in rule.head.args[:-1]:
            if isinstance(term, Var):
                cols.append(by_var[term.name])
            else:
                cols.append([coerce(term.value, schema.columns[len(cols)].type)] * len(slots))
        cols.append(self._results(i, slots))
        return cols

    def _values(self, vtype: str, codes: I64) -> Any:
        """The values of ``codes`` as a column: int64 or float64 arrays, else a list."""
        if vtype == "float":
            return self.codes["float"].floats(codes)
        if vtype == "int":
            values, big = self.codes["int"].ints(codes)
            if not big.any():
                return values
        return self.codes[vtype].decode(codes)

    def _results(self, i: int, slots: I64) -> Any:
        """The aggregates of non-empty groups ``slots`` of rule i, as a column."""
        gr = self.groups[i]
        if gr.func == "count":
            return gr.n[slots].copy()
        if gr.func in ("min", "max"):
            return self._values(gr.vtype, gr.best[slots])
        hi, lo = gr.hi[slots], gr.lo[slots]
        if not gr.wide and (hi == (lo >> 63)).all():  # (every sum one int64)
            return lo.astype(np.float64) if gr.func == "total" or gr.float_result else lo
        return [self._result(i, s) for s in slots.tolist()]


class ColumnarAggregates(GroupArrays):
    """A non-recursive stratum of aggregate rules (one per predicate) maintained on arrays:
    the assignments by a columnar stratum, the groups by ``_Groups``."""

    strategy = "dbsp"

    def __init__(self, prog: AnalyzedProgram, stratum: Stratum,
                 coding: SharedCoding | None = None):
        reason = aggregates_reason(prog, stratum)
        if reason is not None:
            raise ValueError(f"stratum {stratum.preds} is not kept on arrays: {reason}")
        shared = coding if coding is not None else SharedCoding()
        super().__init__(prog, stratum, shared)
        self.stratum = stratum
        _, asg_stratum, _ = _assignments(prog, stratum)
        self.inner = ColumnarStratum(self.asg_prog, asg_stratum, None, shared)
        self.work: dict[str, int] = {}

    # -- the stratum's contract ------------------------------------------------------------
    def initialize(self, store: RelationStore) -> dict[str, CodedRows | set[Row]]:
        self.inner.initialize(store)
        out: dict[str, CodedRows | set[Row]] = {}
        touched = 0
        for i, rule in enumerate(self.rules):
            facts = self.inner.counted[rule.head.pred + ASSIGNED].facts()
            touched += len(facts)
            slots = self.add(i, facts, np.ones(len(facts), np.int64))
            live = _distinct(slots)
            out[rule.head.pred] = self._coded(i, live)
        self.work = {**self.inner.work, "aggregate_assignments": touched}
        return out

    def apply(self, store: RelationStore, deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        self.inner.apply(store, deltas)
        out: dict[str, Delta] = {}
        touched = 0
        for i, rule in enumerate(self.rules):
            came, went = self.inner.last_change.get(rule.head.pred + ASSIGNED, (_E64, _E64))
            if not len(came) and not len(went):
                continue
            touched += len(came) + len(went)
            keys = np.concatenate([came, went])
            w = np.concatenate([np.ones(len(came), np.int64), -np.ones(len(went), np.int64)])
            d = self.change(i, keys, w)
            if d:
                out[rule.head.pred] = d
        self.work = {**self.inner.work, "aggregate_assignments": touched}
        return out
