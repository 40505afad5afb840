"""A rule's first evaluation on the compiled join, its sensitivity intervals recorded as
arrays (Veldhuizen 2014, §4.1): the bulk of what a sensitivity stratum's load builds.

The rule's relations are coded (``deltalog.engine.columnar.encoding``), the compiled
leapfrog triejoin (``kernels.lftj``) runs on the maintainer's own variable order and
column orders with recording on, and each index (atom, depth) gets its intervals as a
``CodedIntervals`` static part: so the intervals that commits stab are the ones the
maintainer's tuple join would look up, keyed and laid out alike. A rule's commits run
on the compiled join too where ``CommitJoin`` allows (else on the tuple join,
``deltalog.engine.ivm.lftj``, which records into the indices' dynamic parts). A load
codes strings by ranks in its own dictionary, which its parts keep; the commits read the
store's coded indexes, whose strings are coded by the store's dictionary
(``deltalog.engine.columnar.strings``: a new string gets a code between its neighbours',
so no other code changes), and what a commit records over strings becomes a part with a
dictionary of its own at once (``Batch.part``), stabbed by value.

What the compiled join does not do the way the tuple join does is refused with
``NotColumnar`` (the reason as its message), and the tuple join records instead: a value
with no 64-bit code or at the ends of the code range (they stand for −inf and +inf), a
variable probed in a column of another type, a variable order the compiled join does
not follow. A variable read from an int and a float column is read as ``uncast``
rewrites the rule (x~int from the int columns, ``x = x~int``), which is the rule the
maintainer (and so the tuple join) reads too: the join converts between the codings
where the tuple join converts values (``bind_as``), except an integral float beyond the
int64s, whose int has no code (``kernels.C_BEYOND``: a recording or a commit that meets
one is refused, and the rule goes on on the tuple join). A variable computed by
arithmetic is computed on the join's output, and in the contexts of the intervals
recorded after its place in the order; comparisons the join does not make on codes
(across int and float, over arithmetic) filter its output (with either, the join has no
existential cut). Negations are checked on the join's output (the tuple join probes
them inside the join), by level and then as written, as the tuple join probes them:
their probes are recorded for the bindings that reach it, and the deeper levels'
intervals under a binding a negation rejects are recorded too, which is more than the
tuple join records and never less than the maintenance needs. Negations of one
relation probed alike (in one column order to one depth: ``!e(y, 1), !e(y, 2)``,
``!e(1, y), !e(2, y)``, ``!e(x, y), !e(y, x)``) share one index, as on the tuple join:
the probes of those coded alike (context and bucket columns, ``probe_layout``) are one
part, those of each other layout one more in the same index (``IntervalIndex.others``),
and a stab asks them all. A complement atom (T \\ S, §3.1.2) reads T's rows that S does
not hold (``complement_rows``), and the negation it absorbed is not checked.
"""

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.columnar import kernels
from deltalog.engine.columnar import rules as columnar_rules
from deltalog.engine.columnar.encoding import Codes, NotColumnar, float_values, int_table
from deltalog.engine.columnar.evaluate import encode_table, rule_constants, rule_strings
from deltalog.engine.columnar.rows import Relation, sorted_distinct
from deltalog.engine.columnar.rules import (
    Cols,
    CompiledRule,
    run_lftj,
    run_recording,
    split_recording,
)
from deltalog.engine.columnar.strings import StoreCodes, StringCodes
from deltalog.engine.columnar.versions import (
    CODED_TYPES,
    CodedIndex,
    code_columns,
    minus_rows,
)
from deltalog.engine.ivm.coded_intervals import (
    Batch,
    CodeBook,
    CodedIntervals,
    Layout,
    Record,
    canonical_bspec,
)
from deltalog.engine.ivm.kernels import absent_depths, build_oracle, lftj_versions
from deltalog.engine.ivm.lftj import IndexKey
from deltalog.engine.ivm.oracle import ChangeOracle, OracleNode
from deltalog.engine.join.plan import Env, RulePlan, negation_perm
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.semantics import compare, eval_expr
from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.engine.storage import CodedRows, RelationStore, permute
from deltalog.engine.syntax.ast import Atom, Const, Expr
from deltalog.engine.values import Row

Unit = tuple[Any, ...]  # a body's values of the variables before the existential level
# A recording join's first buffer (see ``run_recording``): at least this many records,
# and at a load this many per row of the join's relations (the triangles record 3.7).
RECORD_ROOM_MIN = 1024
RECORD_ROOM_PER_ROW = 4


class UnitColumns(Mapping[Unit, Env]):
    """The units of a body as the compiled recording finds them: columns of Python values
    of the variables ``names`` (distinct rows). A unit is the tuple of a row's values, its
    environment the dict of them, made when asked for; ``columns`` lets a head project
    all of them at once (``deltalog.engine.ivm.stratum``)."""

    def __init__(self, names: Sequence[str], columns: Sequence[list[Any]]):
        if not columns:
            raise ValueError("units of no variable are a dict")
        self.names, self.columns = tuple(names), list(columns)
        self._held: set[Unit] | None = None

    def __len__(self) -> int:
        return len(self.columns[0])

    def __iter__(self) -> Iterator[Unit]:
        return zip(*self.columns, strict=True)

    def __contains__(self, unit: object) -> bool:
        if self._held is None:
            self._held = set(self)
        return unit in self._held

    def __getitem__(self, unit: Unit) -> Env:
        if unit not in self:
            raise KeyError(unit)
        return dict(zip(self.names, unit, strict=True))

    def items(self) -> Iterator[tuple[Unit, Env]]:  # type: ignore[override]
        names = self.names
        return ((unit, dict(zip(names, unit, strict=True))) for unit in self)


@dataclass
class Recording:
    """What ``record_body`` gives: the units of the body, its sensitivity intervals as
    static parts by index key (one per layout: negations probed alike share a key; and
    the few a negation with no bound variable records, as values), how many intervals,
    ``sorted_rows(pred, perm)``: a relation's rows with columns in ``perm`` order, sorted
    (codes order as the values do), for the store's indexes, and ``coded(pred, perm)``:
    the same as a coded index (an int and float relation's, for the commits' compiled
    join)."""

    units: Mapping[Unit, Env]
    parts: dict[IndexKey, list[CodedIntervals]]
    plain: dict[IndexKey, list[Record]]
    added: int
    sorted_rows: Callable[[str, tuple[int, ...]], list[Row]]
    coded: Callable[[str, tuple[int, ...]], CodedIndex]


class LoadCoding:
    """The relations a load's rules read, coded once for all of them: one dictionary of
    every string the relations and the rules hold (order-preserving codes), each relation
    a table of codes with its sorted indexes (``Relation``). A relation with a value that
    has no code (an integer beyond 64 bits, a value at the ends of the 64-bit range) is
    refused, and so is every rule that reads it (``relations_of``); a rule whose own
    constants are not strings is refused by ``rule_strings``. Raises ``NotColumnar`` when
    the dictionary cannot be made (a value that is not a string in a string column)."""

    def __init__(self, prog: AnalyzedProgram, store: RelationStore, preps: Sequence[Any]):
        self.refused: dict[str, str] = {}
        # Each relation's rows read once: an int relation straight into an array (ints
        # are their own codes), any other as columns, whose strings the dictionary needs
        # first.
        tables: dict[str, Any] = {}
        listed: dict[str, list[list[Any]]] = {}
        strings: list[set[Any]] = []
        for prep in preps:
            with contextlib.suppress(NotColumnar):  # (that rule's recording finds out)
                strings.append(set(rule_strings(prep.rule)))
        preds = sorted({a.pred for prep in preps for a in (*prep.atoms, *prep.negations)})
        for pred in preds:
            try:
                got = _read_relation(prog.schemas[pred], store[pred].rows)
            except NotColumnar as why:
                self.refused[pred] = str(why)
                continue
            if isinstance(got, np.ndarray):
                tables[pred] = got
                continue
            listed[pred] = got
            strings += [set(col) for col, c in zip(got, prog.schemas[pred].columns,
                                                   strict=True) if c.type == "string"]
        self.codes = codes = Codes(strings)
        # The store's dictionary holds them too: the coded indexes the rules' commits
        # read code strings by it (``store_codes``).
        self.store = store
        if len(codes.strings) or any(
                c.type == "string" for pred in preds for c in prog.schemas[pred].columns):
            if store.strings is None:
                store.strings = StringCodes()
            store.strings.add(codes.strings.tolist())
        self._to_store: tuple[int, NDArray[np.int64]] | None = None
        for pred, columns in listed.items():
            tables[pred] = encode_table(codes, prog.schemas[pred], columns, len(columns[0]))
        self.relations: dict[str, Relation] = {}
        for pred, table in tables.items():
            if (table == kernels.BOT).any() or (table == kernels.TOP).any():
                self.refused[pred] = "a value at the ends of the 64-bit range"
            else:
                self.relations[pred] = Relation.of(table)

    def store_codes(self, table: NDArray[np.int64], types: Sequence[str]
                    ) -> NDArray[np.int64]:
        """A table of this load's codes as the store's: its string columns' ranks mapped
        to the codes of the store's dictionary (which orders them alike)."""
        if "string" not in types or not len(table):
            return table
        strings: StringCodes = self.store.strings
        if self._to_store is None or self._to_store[0] != strings.epoch:
            got = strings.codes_of(self.codes.strings.tolist())
            assert got is not None  # (added when the load was coded)
            self._to_store = (strings.epoch, got)
        to_store = self._to_store[1]
        table = table.copy()
        for j, typ in enumerate(types):
            if typ == "string":
                table[:, j] = to_store[table[:, j]]
        return table

    def relations_of(self, prep: Any) -> dict[str, Relation]:
        """The coded relations the rule ``prep`` reads; ``NotColumnar`` when it cannot be
        recorded on them (a constant not coded, a relation refused)."""
        for value in rule_strings(prep.rule):  # not a string: NotColumnar
            self.codes.code(value, "string")
        if any(type(v) is int and not kernels.BOT < v < kernels.TOP
               for v in rule_constants(prep.rule)):  # (the codes of -inf and +inf)
            raise NotColumnar("a value at the ends of the 64-bit range")
        preds = sorted({a.pred for a in (*prep.atoms, *prep.negations)})
        for pred in preds:
            if pred in self.refused:
                raise NotColumnar(self.refused[pred])
        return {pred: self.relations[pred] for pred in preds}


def _read_relation(schema: Any, held: Any) -> "NDArray[np.int64] | list[list[Any]]":
    """A relation's rows for coding: an int relation as its table (ints are their own
    codes), any other as columns of Python values."""
    ints = all(c.type == "int" for c in schema.columns)
    if type(held) is CodedRows and len(held):  # a columnar stratum's: read by column
        by_col = held.columns()
        if any(c.dtype == object for c, s in zip(by_col, schema.columns, strict=True)
               if s.type == "int"):
            raise NotColumnar("an integer beyond 64 bits")
        if ints:
            return np.stack(by_col, axis=1)
        return [c.tolist() for c in by_col]
    rows = list(held)
    if not rows:
        return np.zeros((0, schema.arity), np.int64)
    if ints:
        try:
            return int_table(rows, schema.arity)
        except OverflowError:
            raise NotColumnar("an integer beyond 64 bits") from None
    return [[r[i] for r in rows] for i in range(schema.arity)]


def _no_float_beyond(counters: NDArray[np.int64]) -> None:
    """``NotColumnar`` when the join converted a float beyond the int64s to an int
    (``kernels.C_BEYOND``): the tuple join looks that int up, and notes its interval,
    where the codes have none."""
    if counters[kernels.C_BEYOND]:
        raise NotColumnar("a float beyond the 64-bit integers read as an int")


def record_body(
    plan: RulePlan, indexed: Sequence[bool], prog: AnalyzedProgram, store: RelationStore,
    stats: JoinStats, coding: "LoadCoding | None" = None,
) -> Recording:
    """The first evaluation of the body ``plan`` joins
    (``deltalog.engine.ivm.rule.RuleMaintainer``'s plan; ``indexed[a]``: atom a has
    sensitivity indices) over the current versions, recorded (``Recording``);
    ``NotColumnar`` when the compiled join cannot record this rule as the tuple join
    would. ``coding``: the relations coded for every rule of the load (default: for this
    rule alone)."""
    prep = plan.prep
    if coding is None:
        coding = LoadCoding(prog, store, [prep])
    codes = coding.codes
    relations = coding.relations_of(prep)
    rule = CompiledRule(prog, prep, codes, relations)

    def sorted_rows(pred: str, perm: tuple[int, ...]) -> list[Row]:
        table = relations[pred].index(perm)
        cols = prog.schemas[pred].columns
        if not perm:  # (a relation of no columns: its rows () or none)
            return [()] * len(table)
        return list(zip(*(codes.python(table[:, j], cols[c].type)
                          for j, c in enumerate(perm)), strict=True)) if len(table) else []

    def coded(pred: str, perm: tuple[int, ...]) -> CodedIndex:
        cols = prog.schemas[pred].columns
        types = [cols[c].type for c in perm]
        return CodedIndex(types, coding.store_codes(relations[pred].index(perm), types),
                          store.strings if "string" in types else None)

    kplan = rule.plan({}, frozenset(), plan.order)
    # The join binds the variables atoms hold or constants and copies give; a variable
    # computed by arithmetic (``t = x + 1``) is computed on its output, and so is the
    # context of an interval recorded after it.
    computed = dict(kplan.post_assign)
    kernel = tuple(kplan.kernel)
    if kernel != tuple(v for v in plan.order if v not in computed):
        raise NotColumnar("a variable order the compiled join does not follow")
    for op, left, right in kplan.pre_checks:
        a, b = eval_expr(left, {}), eval_expr(right, {})
        if a is None or b is None or not compare(op, a, b):
            return Recording({}, {}, {}, 0, sorted_rows, coded)
    # An atom of no columns (a switch) holds when its relation has the row (); a change
    # to it re-evaluates the whole rule, so it records nothing (``RuleMaintainer``).
    if any(not a.vars and not len(relations[a.pred].index(())) for a in prep.atoms):
        return Recording({}, {}, {}, 0, sorted_rows, coded)
    pos = {v: i for i, v in enumerate(plan.order)}
    # Negations are checked on the join's output, so it runs to the last level any
    # negation reads: the tuple join probes one where its last bound variable is bound.
    # A negation a complement atom absorbed is not checked: the atom reads T \ S.
    # They are probed as the tuple join probes them: by level, then as written.
    absorbed = set(plan.complements.values())
    probes = []
    for k, neg in enumerate(prep.negations):
        if k in absorbed:
            continue
        bound = {v for v in neg.vars if v in pos}
        probes.append((neg, negation_perm(neg, bound),
                       max((pos[v] for v in bound), default=-1)))
    probes.sort(key=lambda p: p[2])
    exist = plan.exist_level
    if computed or kplan.post_checks:  # no existential cut: they are checked after it
        kplan.exist = len(kernel)
    else:
        kplan.exist = max([exist] + [j + 1 for _, _, j in probes])
    kplan.out = list(kernel[: kplan.exist])
    sources = [relations[a.pred] for a in prep.atoms]
    for a, k in plan.complements.items():
        sources[a] = complement_rows(relations[prep.atoms[a].pred],
                                     relations[prep.negations[k].pred])
    args, slots, atom_of = rule.kernel_args(kplan, sources)
    flat = [(level, atom_of[k], depth) for level, sl in enumerate(slots) for k, depth in sl]
    slot_rec = np.array([1 if indexed[a] else 0 for _, a, _ in flat], np.int64)
    nlev = len(plan.order)
    pieces = split_recording(kplan, args[0], slots[0] if slots else [])
    # a piece's first buffer: a few records per row of the join's relations, then what
    # the pieces done so far needed
    room = [RECORD_ROOM_MIN + RECORD_ROOM_PER_ROW * sum(len(r) for r in args[0]) // len(
        pieces)]

    def piece(i: int) -> tuple[Any, ...]:
        counts = np.zeros(kernels.N_COUNTERS, np.int64)

        def run(rec: NDArray[np.int64]) -> tuple[Any, ...]:
            counts[:] = 0
            return run_lftj(args, counts, *pieces[i], slot_rec, rec)  # type: ignore[no-any-return]

        got = run_recording(run, 3 + nlev, room[0])
        room[0] = max(room[0], got[3] + got[3] // 4)
        return (*got, counts)

    if len(pieces) == 1:
        out, n, rec, rn, counters = piece(0)
    else:  # threads over pieces of the first variable (the kernel releases the GIL)
        with ThreadPoolExecutor(columnar_rules.THREADS) as pool:
            done = list(pool.map(piece, range(len(pieces))))
        out = np.concatenate([o[:k] for o, k, _, _, _ in done])
        rec = np.concatenate([r[:k] for _, _, r, k, _ in done])
        n, rn = len(out), len(rec)
        counters = np.sum([c for *_, c in done], axis=0)
    _no_float_beyond(counters)
    stats.opens += int(counters[kernels.C_OPENS])
    stats.seeks += int(counters[kernels.C_SEEKS])
    stats.nexts += int(counters[kernels.C_NEXTS])
    types = [rule.types[v] for v in plan.order]
    book = CodeBook(codes.strings.tolist())
    parts: dict[IndexKey, list[CodedIntervals]] = {}
    plain: dict[IndexKey, list[Record]] = {}
    out = np.ascontiguousarray(out[:n])
    cols = Cols(n, {v: out[:, i] for i, v in enumerate(kplan.out)},
                 {v: rule.types[v] for v in kplan.out})
    for v, e in kplan.post_assign:
        rule.assign(cols, v, e)
    for op, left, right in kplan.post_checks:
        cols.keep(rule.check(cols, op, left, right))
    added = 0
    probed: dict[tuple[IndexKey, Layout], list[tuple[NDArray[np.int64], NDArray[np.int64]]]] = {}
    rejected = False  # (by a negation probed before the join: the tuple join stops there)
    for neg, perm, j in probes:
        if rejected:
            break
        spec = _probe_spec(prog, rule, neg, perm, pos)
        added += _record_probes(cols, neg.pred, perm, spec, j, types, pos, book, probed, plain)
        if j < 0:
            table = relations[neg.pred].index(perm)
            want = np.array([ref for _, ref, _ in spec], np.int64)
            rejected = bool((table[:, : len(spec)] == want).all(axis=1).any())
        if cols.n:
            cols.keep(~rule.negated(cols, neg))
    # Negations probed alike file their probes under one key, as the tuple join does: the
    # probes of one layout (context, bucket) one part, of each other layout one more
    # (``IntervalIndex.others``).
    for (key, (ltypes, xtype, bspec, _)), got in probed.items():
        ctx = np.concatenate([c for c, _ in got]) if len(got) > 1 else got[0][0]
        point = np.concatenate([x for _, x in got]) if len(got) > 1 else got[0][1]
        bspec = tuple((kind, book.code(v, t) if kind and t == "string" else v, t)
                      for kind, v, t in bspec)  # (the layout's string constants: values)
        parts.setdefault(key, []).append(CodedIntervals(
            book, ltypes, xtype, bspec, ctx, point, point.copy(), split=True,
            distinct=len(got) > 1))
    # Units: the distinct values of the variables before the existential level.
    kept = np.stack([cols.codes[v] for v in plan.order[:exist]], axis=1) if exist else (
        np.zeros((cols.n, 0), np.int64))
    kept = sorted_distinct(kept) if exist else kept[:1]
    units: Mapping[Unit, Env] = UnitColumns(
        plan.order[:exist], [codes.python(kept[:, j], types[j]) for j in range(exist)]
    ) if exist else ({(): {}} if len(kept) else {})
    added += _index_parts(rec[:rn], flat, plan, rule, kernel, computed, book, parts)

    return Recording(units, parts, plain, added, sorted_rows, coded)


def complement_rows(t: Relation, s: Relation) -> Relation:
    """T \\ S (Veldhuizen 2014, §3.1.2) as a relation of codes: T's rows that S does not
    hold, still sorted. The compiled join reads it as the complement atom's trie, whose
    keys, and so whose seeks and recorded intervals, are those of the tuple join's
    complement iterator; at a load it costs a pass over T and S, as reading T would."""
    rows = t.rows
    if not len(rows) or not len(s):
        return t
    return Relation.of(minus_rows(np.ascontiguousarray(rows), s.index(tuple(range(s.arity)))))


def _index_parts(rec: NDArray[np.int64], flat: list[tuple[int, int, int]], plan: RulePlan,
                 rule: CompiledRule, kernel: Sequence[str], computed: dict[str, Expr],
                 book: CodeBook, parts: dict[IndexKey, list[CodedIntervals]]) -> int:
    """The join's records (rows (slot, lo, hi, the values of the earlier levels)) as one
    part per index into ``parts`` (``_index_batches``), the parts made on threads when
    the records are many. Returns how many intervals."""
    def part(item: tuple[IndexKey, Batch]) -> tuple[IndexKey, list[CodedIntervals]]:
        key, b = item
        return key, [CodedIntervals(book, b.types, b.xtype, b.bspec, b.ctx, b.lo, b.hi)]

    batches: dict[IndexKey, Batch] = {}
    added = _index_batches(rec, flat, plan, rule, kernel, computed, batches)
    parts.update(_mapped(part, list(batches.items()), len(rec)))
    return added


def _mapped(fn: Callable[[Any], Any], items: list[Any], size: int) -> list[Any]:
    """``fn`` over ``items``, on threads when ``size`` (the rows behind them) is large
    enough to split a join (their numpy and compiled steps release the GIL)."""
    threads = columnar_rules.THREADS
    if len(items) < 2 or threads < 2 or size < columnar_rules.SPLIT_MIN:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def _index_batches(rec: NDArray[np.int64], flat: list[tuple[int, int, int]], plan: RulePlan,
                   rule: CompiledRule, kernel: Sequence[str], computed: dict[str, Expr],
                   batches: dict[IndexKey, Batch]) -> int:
    """The join's records as one batch per index into ``batches``, by slot: the slot's
    level L gives the context width, its atom and depth the index; the bucket is the
    atom's earlier columns, each an earlier variable. Returns how many intervals."""
    if not len(rec):
        return 0
    prep = plan.prep
    pos = {v: i for i, v in enumerate(plan.order)}
    types = [rule.types[v] for v in plan.order]
    slot = rec[:, 0].astype(np.int16) if len(flat) < 2**15 else rec[:, 0]
    by_slot = np.argsort(slot, kind="stable")  # a radix sort on int16
    bounds = np.searchsorted(slot[by_slot], np.arange(len(flat) + 1))

    def batch(s: int) -> tuple[IndexKey, Batch] | None:
        lo_, hi_ = int(bounds[s]), int(bounds[s + 1])
        if lo_ == hi_:
            return None
        level, a, depth = flat[s]
        atom = prep.atoms[a]
        perm = plan.perms[a]
        bcols = [pos[atom.vars[perm[k]]] for k in range(depth)]
        part = _uncontained(rec[by_slot[lo_:hi_]], level)
        at = pos[kernel[level]]  # the level's place in the maintainer's order
        ctx, keep = _contexts(rule, tuple(kernel[:level]), plan.order[:at], computed,
                              part[:, 3 : 3 + level])
        return ("atom", a, depth), Batch(
            tuple(types[:at]), types[at], tuple((0, c, types[c]) for c in bcols),
            ctx, part[keep, 1], part[keep, 2],
        )

    added = 0
    # (a computed variable's context is computed through the rule's codes: one thread)
    for got in _mapped(batch, list(range(len(flat))), 0 if computed else len(rec)):
        if got is not None:
            batches[got[0]] = got[1]
            added += len(got[1].lo)
    return added


def _uncontained(part: NDArray[np.int64], level: int) -> NDArray[np.int64]:
    """The records of one slot (rows (slot, lo, hi, the values of the ``level`` earlier
    levels), in the order the join made them) without those a neighbour with the same
    context contains: a point such an interval holds is in the neighbour too, so a stab
    finds the same region (an opened atom's [k, k] before it moves past k to [k, k'],
    for one). Of two equal intervals the later goes; a dropped one's container is kept
    or dropped into a container in turn, never both ways (containment is strict one way)."""
    n = len(part)
    if n < 2:
        return part
    lo, hi = part[:, 1], part[:, 2]
    same = np.ones(n - 1, np.bool_)
    for j in range(3, 3 + level):
        same &= part[1:, j] == part[:-1, j]
    in_prev = same & (lo[1:] >= lo[:-1]) & (hi[1:] <= hi[:-1])
    prev_in = same & (lo[1:] <= lo[:-1]) & (hi[1:] >= hi[:-1]) & ~in_prev
    drop = np.zeros(n, np.bool_)
    drop[1:] |= in_prev
    drop[:-1] |= prev_in
    return part[~drop] if drop.any() else part


def _contexts(rule: CompiledRule, bound: tuple[str, ...], before: tuple[str, ...],
              computed: dict[str, Expr], values: Any) -> tuple[Any, Any]:
    """The contexts of intervals recorded with the join's values of ``bound``: the values
    of the variables ``before`` their level, the computed ones computed from those; and
    which records have one (an arithmetic without a result, a division by zero, leaves a
    context the tuple join never reaches, so nothing there depends on the data)."""
    m = len(values)
    if len(before) == len(bound):
        return np.ascontiguousarray(values), np.arange(m)
    cols = Cols(m, {v: values[:, i] for i, v in enumerate(bound)},
                 {v: rule.types[v] for v in bound})
    cols.codes["#record"] = np.arange(m)
    cols.types["#record"] = "int"
    for v in before:
        if v in computed:
            rule.assign(cols, v, computed[v])
    ctx = np.stack([cols.codes[v] for v in before], axis=1) if before else (
        np.zeros((cols.n, 0), np.int64))
    return np.ascontiguousarray(ctx, np.int64), cols.codes["#record"]


def _record_probes(
    cols: Cols, pred: str, perm: tuple[int, ...], spec: list[tuple[int, int, str]], j: int,
    types: list[str], pos: dict[str, int], book: CodeBook,
    probed: dict[tuple[IndexKey, Layout], list[tuple[NDArray[np.int64], NDArray[np.int64]]]],
    plain: dict[IndexKey, list[Record]],
) -> int:
    """The intervals of the probes the tuple join makes for the bindings in ``cols`` of a
    negation of ``pred`` probed in column order ``perm`` (``spec``, ``_probe_spec``'s)
    (Veldhuizen 2014, §4.1: a probe of prefix p depends on p alone): index
    ("neg", relation, column order, depth), bucket the prefix but its last value, lo =
    hi = that value, payload (the values before level ``j``, the value at ``j``), as
    (contexts, points) into ``probed`` by key and layout (``probe_layout``); a negation
    with no bound variable is probed once, before the join, and its change re-evaluates
    the whole rule (payload None, into ``plain``; "whole" when it has no constant
    either)."""
    key = _probe_key(pred, perm, spec)
    if j < 0:
        consts = tuple(book.value(ref, typ) for _, ref, typ in spec)
        plain.setdefault(key, []).append((consts[:-1], consts[-1], consts[-1], None)
                                         if consts else ((), BOTTOM, TOP, None))
        return 1
    if not cols.n:
        return 0
    ctx = sorted_distinct(np.stack([cols.codes[v] for v in list(pos)[: j + 1]], axis=1))
    kind, ref, _ = spec[-1]
    point = ctx[:, ref].copy() if kind == 0 else np.full(len(ctx), ref, np.int64)
    probed.setdefault((key, probe_layout(types, j, spec, book.value)), []).append(
        (ctx, point))
    return len(ctx)


def _probe_key(pred: str, perm: tuple[int, ...],
               spec: Sequence[tuple[int, int, str]]) -> IndexKey:
    """The index of a negation's probes: ("neg", relation, column order, depth), or
    ("whole", relation) for one with no bound variable or constant."""
    return ("neg", pred, perm, len(spec) - 1) if spec else ("whole", pred)


def probe_layout(types: Sequence[str], j: int, spec: Sequence[tuple[int, int, str]],
                 value: Callable[[int, str], Any]) -> Layout:
    """How the probes of a negation are coded (``CodedIntervals``, ``Batch``): context the
    rule's variables to level ``j`` (of ``types``), bucket the probe's columns but its
    last (``spec``, ``_probe_spec``'s: a string constant decoded by ``value``), split.
    Negations probed alike share an index key; those whose probes are coded alike share
    a part too."""
    return (tuple(types[: j + 1]), spec[-1][2], canonical_bspec(spec[:-1], value), True)


def _probe_spec(prog: AnalyzedProgram, rule: CompiledRule, neg: Atom, perm: tuple[int, ...],
                pos: dict[str, int]) -> list[tuple[int, int, str]]:
    """The columns of a probe of ``!neg`` in column order ``perm`` (its constants and the
    variables bound at the levels ``pos`` gives): (1, a constant's code, its type) or (0,
    the level of a variable, its type); ``NotColumnar`` for a variable probed in a column
    of another type."""
    schema = prog.schemas[neg.pred]
    spec: list[tuple[int, int, str]] = []
    for i in perm:
        arg = neg.args[i]
        typ = schema.columns[i].type
        if isinstance(arg, Const):
            value = float(arg.value) if typ == "float" else arg.value  # type: ignore[arg-type]
            spec.append((1, rule.codes.code(value, typ), typ))
        elif arg.name in pos:
            if rule.types[arg.name] != typ:
                raise NotColumnar(f"a {rule.types[arg.name]} value probed in a {typ} column")
            spec.append((0, pos[arg.name], typ))
    return spec


class _Perms:
    """Stands for a rule's relations when only the kernel's plan is wanted: each atom's
    index asked for is noted, and an empty table given."""

    def __init__(self, arity: int):
        self.arity = arity
        self.asked: list[tuple[int, ...]] = []

    def index(self, perm: tuple[int, ...]) -> NDArray[np.int64]:
        self.asked.append(perm)
        return np.zeros((0, self.arity), np.int64)


class CommitJoin:
    """A rule's commits on the compiled join (``deltalog.engine.ivm.kernels``): the old and
    the new body evaluated inside the change oracle over the coded versions of its
    relations (``deltalog.engine.columnar.versions``), the new one recording its
    intervals as parts on arrays. Built for a rule whose body the kernel joins as the
    maintainer's plan orders it (arithmetic, comparisons after the join, negations and
    complement atoms made as the load makes them); anything else raises ``NotColumnar``
    (the reason), and its commits stay on the tuple join. Strings are coded by the
    store's dictionary (``strings``, which the rule's string constants are added to);
    ``epoch`` is its relabelling the codes are of (a later one: build the join again)."""

    rec_room = 1024  # the buffer a recording commit starts with (then the last one's records)

    def __init__(self, plan: RulePlan, indexed: Sequence[bool], prog: AnalyzedProgram,
                 strings: StringCodes | None = None):
        prep = plan.prep
        # atoms of no columns (switches): the body holds in a version where each has ()
        self.switches = sorted({a.pred for a in prep.atoms if not a.vars})
        if len(prep.atoms) > kernels.ATOM_SLOTS:
            # (the commit kernel would be compiled again for the longer tuple: minutes)
            raise NotColumnar(f"a body of more than {kernels.ATOM_SLOTS} atoms")
        # (a negation's index holds every column of its relation)
        for pred in [*(a.pred for a in prep.atoms), *(n.pred for n in prep.negations)]:
            for c in prog.schemas[pred].columns:
                if c.type not in CODED_TYPES:
                    raise NotColumnar(f"a {c.type} column in {pred}")
        constants = rule_strings(prep.rule)
        uses_strings = bool(constants) or any(
            c.type == "string" for p in [*(a.pred for a in prep.atoms),
                                         *(n.pred for n in prep.negations)]
            for c in prog.schemas[p].columns)
        codes: Codes = Codes([set(constants)])
        if uses_strings:
            if strings is None:
                raise NotColumnar("strings with no dictionary of the store's")
            strings.add(constants)
            codes = StoreCodes(strings)
        self.strings = strings if uses_strings else None
        self.epoch = self.strings.epoch if self.strings is not None else 0
        rule = CompiledRule(prog, prep, codes, {})  # (as ``record_body``)
        kplan = rule.plan({}, frozenset(), plan.order)
        # As at the load (``record_body``): a variable computed by arithmetic is computed
        # on the join's output, and comparisons the join does not make on codes filter
        # it; the join then has no existential cut, and its oracle no level for such a
        # variable (``Regions``: a region there is widened to the subtree above it).
        self.computed = dict(kplan.post_assign)
        self.kernel = tuple(kplan.kernel)
        if self.kernel != tuple(v for v in plan.order if v not in self.computed):
            raise NotColumnar("a variable order the compiled join does not follow")
        self.post_checks = list(kplan.post_checks)
        self.never = False  # a comparison of constants that fails: the body is empty
        for op, left, right in kplan.pre_checks:
            a_, b_ = eval_expr(left, {}), eval_expr(right, {})
            if a_ is None or b_ is None or not compare(op, a_, b_):
                self.never = True
        self.negs = _commit_probes(prog, rule, plan)
        if self.computed or self.post_checks:
            kplan.exist = len(self.kernel)
        else:
            kplan.exist = max([plan.exist_level] + [j + 1 for _, _, _, j, _ in self.negs])
        kplan.out = list(self.kernel[: kplan.exist])
        self.out = tuple(kplan.out)
        self.kept = [v not in self.computed for v in plan.order]
        shims = [_Perms(len(a.vars)) for a in prep.atoms]
        args, slots, atom_of = rule.kernel_args(kplan, shims)  # type: ignore[arg-type]
        self.atoms: list[tuple[str, tuple[int, ...]]] = []
        for k in atom_of:
            perm = shims[k].asked[0]
            if perm != plan.perms[k]:
                raise NotColumnar("a column order the compiled join does not follow")
            self.atoms.append((prep.atoms[k].pred, perm))
        self.atom_of = list(atom_of)  # (the body's atom each of the join's atoms is)
        # A complement atom (T \ S) reads a coded index of its own, which the rule's
        # maintainer keeps (``RuleMaintainer._complement_versions``).
        self.complements = dict(plan.complements)
        self._types = {(pred, perm): [prog.schemas[pred].columns[c].type for c in perm]
                       for pred, perm in [*self.atoms, *self.relations()]}
        # the plan's arrays, after the relations (less the lower bounds: the checks they
        # stand for stay in the plan)
        self.args = args[1:12] + args[15:17]
        self.flat = [(level, atom_of[k], depth) for level, sl in enumerate(slots)
                     for k, depth in sl]
        self.slot_rec = np.array([1 if indexed[a] else 0 for _, a, _ in self.flat], np.int64)
        self.plan = plan
        self.rule = rule
        self.types = [rule.types[v] for v in plan.order]

    def value(self, code: int, typ: str) -> Any:
        """The value of a code of this join's."""
        return self.rule.codes.python(np.array([code], np.int64), typ)[0]

    def stale(self) -> bool:
        """Whether the store's dictionary was relabelled since this join was built (its
        constants' codes are then not the indexes')."""
        return self.strings is not None and self.strings.epoch != self.epoch

    def relations(self) -> list[tuple[str, tuple[int, ...]]]:
        """(relation, column order) of every index the join reads as codes (its atoms',
        then its negations')."""
        return [(pred, perm) for k, (pred, perm) in zip(self.atom_of, self.atoms, strict=True)
                if k not in self.complements] + [
                    (pred, perm) for _, pred, perm, _, spec in self.negs if spec]

    def column_types(self, pred: str, perm: tuple[int, ...]) -> list[str]:
        """The types of the columns of one of those indexes, in its order."""
        return self._types[(pred, perm)]

    def evaluate(self, store: RelationStore, oracle: tuple[NDArray[np.int64], ...], old: bool,
                 record: bool, stats: JoinStats,
                 complements: "Mapping[int, CodedIndex] | None" = None,
                 ) -> tuple[dict[Unit, Env], list[tuple[IndexKey, Batch]], int]:
        """The units of the body (the old or the new versions) inside the ``oracle``
        (``Regions.flat``), and with ``record`` its intervals as batches with their index
        keys (negations probed alike: a key more than once), and how many;
        ``complements[a]``: complement atom a's T \\ S, coded."""
        if self.never:
            return {}, [], 0
        for pred in self.switches:  # (a switch holds where a negation of it would not)
            if not _holds_prefix(store, pred, (), (), old):
                return {}, [], 0
        for _, pred, perm, j, spec in self.negs:  # those with no variable bound: once
            if j < 0 and _holds_prefix(store, pred, perm, spec, old):
                return {}, [], 0
        versions = []
        for k, (pred, perm) in zip(self.atom_of, self.atoms, strict=True):
            coded = (complements or {}).get(k) if k in self.complements else (
                store[pred].coded(perm))
            if coded is None:
                raise NotColumnar(f"{pred} keeps no coded index")
            versions.append(coded.version(old))
        counters = np.zeros(kernels.N_COUNTERS, np.int64)
        atoms = (kernels.atom_tuple([v[0] for v in versions]),
                 kernels.atom_tuple([v[1] for v in versions]),
                 kernels.atom_tuple([v[2] for v in versions]))

        def run(rec: NDArray[np.int64]) -> tuple[Any, ...]:
            counters[:] = 0
            return lftj_versions(  # type: ignore[call-arg,no-any-return]
                *atoms, *self.args, counters, *oracle, self.slot_rec, rec)

        if record:  # (a buffer as large as the last commit's records)
            out, n, rec, rn = run_recording(run, 3 + len(self.types), self.rec_room)
            self.rec_room = max(RECORD_ROOM_MIN, int(rn))
        else:
            out, n, rec, rn = run(np.empty((0, 3 + len(self.types)), np.int64))
        _no_float_beyond(counters)
        stats.opens += int(counters[kernels.C_OPENS])
        stats.seeks += int(counters[kernels.C_SEEKS])
        stats.nexts += int(counters[kernels.C_NEXTS])
        order = self.plan.order
        exist = self.plan.exist_level
        by_key: dict[IndexKey, Batch] = {}
        added = _index_batches(rec[:rn], self.flat, self.plan, self.rule, self.kernel,
                               self.computed, by_key) if record else 0
        batches = list(by_key.items())
        out = np.ascontiguousarray(out[:n])
        rule = self.rule
        cols = Cols(n, {v: out[:, i] for i, v in enumerate(self.out)},
                    {v: rule.types[v] for v in self.out})
        for v, e in self.computed.items():
            rule.assign(cols, v, e)
        for op, left, right in self.post_checks:
            cols.keep(rule.check(cols, op, left, right))
        for key, pred, perm, j, spec in self.negs:
            # the probes the tuple join makes for the bindings that reach the negation
            # (recorded as the load records them), then the bindings it rejects dropped
            # (one with no variable bound was probed before the join: the load's record
            # of it stays, and a change to its prefix re-evaluates the whole rule)
            if j < 0:
                continue
            if not cols.n:
                break
            if record:
                ctx = sorted_distinct(np.stack([cols.codes[v] for v in order[: j + 1]], axis=1))
                kind, ref, typ = spec[-1]
                point = ctx[:, ref].copy() if kind == 0 else np.full(len(ctx), ref, np.int64)
                batches.append((key, Batch(tuple(self.types[: j + 1]), typ,
                                           canonical_bspec(spec[:-1], self.value), ctx,
                                           point, point.copy(), split=True)))
                added += len(ctx)
            probes = np.empty((cols.n, len(spec)), np.int64)
            for c, (kind, ref, _) in enumerate(spec):
                probes[:, c] = cols.codes[order[ref]] if kind == 0 else ref
            coded = store[pred].coded(perm)
            if coded is None:
                raise NotColumnar(f"{pred} keeps no coded index")
            cols.keep(absent_depths(  # type: ignore[call-arg]
                *coded.version(old), probes) < len(spec))
        units: dict[Unit, Env] = {}
        if not exist:
            if cols.n:
                units[()] = {}
            return units, batches, added
        kept = np.stack([cols.codes[v] for v in order[:exist]], axis=1)
        if len(kept) and (exist < len(self.out) or self.computed):
            kept = sorted_distinct(np.ascontiguousarray(kept))
        names = order[:exist]
        columns = [rule.codes.python(kept[:, j], self.types[j]) for j in range(exist)]
        for values in zip(*columns, strict=True):
            units[values] = dict(zip(names, values, strict=True))
        return units, batches, added


def _commit_probes(prog: AnalyzedProgram, rule: CompiledRule, plan: RulePlan
                   ) -> list[tuple[IndexKey, str, tuple[int, ...], int, tuple[Any, ...]]]:
    """The negations of a commit's body as the load records their probes
    (``_record_probes``): per negation its index key, relation, column order, the level
    j of its last bound variable (it is checked on the join's output, which runs that
    deep) and the probe's columns ((0, the level of a variable, its type) or (1, a
    constant's code, its type); j is -1 for one with no variable bound, probed once
    before the join (its index the load's: "whole" when it has no constant either). In
    the order the tuple join probes them: by level, then as written (negations probed
    alike share a key). ``NotColumnar`` for one the compiled commit does not make: a
    variable probed in a column of another type (``_probe_spec``)."""
    pos = {v: i for i, v in enumerate(plan.order)}
    out: list[tuple[IndexKey, str, tuple[int, ...], int, tuple[Any, ...]]] = []
    absorbed = set(plan.complements.values())  # (a complement atom reads T \ S instead)
    for k, neg in enumerate(plan.prep.negations):
        if k in absorbed:
            continue
        bound = {v for v in neg.vars if v in pos}
        perm = negation_perm(neg, bound)
        spec = _probe_spec(prog, rule, neg, perm, pos)
        key = _probe_key(neg.pred, perm, spec)
        out.append((key, neg.pred, perm, max((pos[v] for v in bound), default=-1),
                    tuple(spec)))
    out.sort(key=lambda neg: neg[3])
    return out


def _holds_prefix(store: RelationStore, pred: str, perm: tuple[int, ...],
                  spec: Sequence[tuple[int, int, str]], old: bool) -> bool:
    """Whether a version of ``pred`` holds a row that starts (in column order ``perm``)
    with the constants of ``spec``, codes all (any row when there are none)."""
    rel = store[pred]
    if not spec:
        size = len(rel)
        if old:  # (the last commit undone)
            size -= sum(1 if w > 0 else -1 for w in rel.delta().values())
        return size > 0
    coded = rel.coded(perm)
    if coded is None:
        raise NotColumnar(f"{pred} keeps no coded index")
    probe = np.array([[ref for _, ref, _ in spec]], np.int64)
    return bool(absent_depths(*coded.version(old), probe)[0] >= len(spec))


def changes_prefix(store: RelationStore, pred: str, perm: tuple[int, ...],
                   spec: Sequence[tuple[int, int, str]], types: Sequence[str]) -> bool:
    """Whether the last commit of ``pred`` changed a row that starts (in column order
    ``perm``) with the constants of ``spec`` (any row when there are none)."""
    rows = list(store[pred].delta())
    if not spec or not rows:
        return bool(rows)
    coded = code_columns([permute(r, perm)[: len(spec)] for r in rows], types[: len(spec)],
                         store.strings)
    if coded is None:  # (a value with no code: not the constants')
        return False
    want = np.array([ref for _, ref, _ in spec], np.int64)
    return bool((coded == want).all(axis=1).any())


def _values(codes: NDArray[np.int64], typ: str, strings: StringCodes | None) -> list[Any]:
    if typ == "string":
        assert strings is not None
        return strings.decode(codes).tolist()  # type: ignore[no-any-return]
    return float_values(codes).tolist() if typ == "float" else codes.tolist()


def _end_codes(values: list[Any], typ: str, strings: StringCodes | None) -> NDArray[np.int64]:
    """Codes of interval ends (``BOTTOM``/``TOP``: the kernels' ``BOT``/``TOP``)."""
    out = np.empty(len(values), np.int64)
    inner = [i for i, v in enumerate(values) if v is not BOTTOM and v is not TOP]
    for i, v in enumerate(values):
        if v is BOTTOM:
            out[i] = kernels.BOT
        elif v is TOP:
            out[i] = kernels.TOP
    if inner:
        got = code_columns([(values[i],) for i in inner], [typ], strings)
        if got is None:
            raise NotColumnar("an interval end with no code")
        out[inner] = got[:, 0]
    return out


class Regions:
    """The regions of a commit's change oracle, on codes (``build_oracle``): a region
    fixes the first levels of the rule's order and gives an interval on the next one;
    one that fixes the existential level or more is widened to the whole subtree of its
    first ``exist`` values (``deltalog.engine.ivm.rule.RuleMaintainer.maintain``)."""

    def __init__(self, types: Sequence[str], exist: int, kept: Sequence[bool] | None = None,
                 strings: StringCodes | None = None):
        """``types``: of the rule's variables in its order; ``kept[p]``: whether the join
        binds the variable at p (not one computed on its output, which the oracle has no
        level for: a region that fixes it is widened to drop it, one with its interval
        to the subtree above it; a larger oracle, never a smaller one); ``strings``: the
        dictionary of string codes."""
        self.types = list(types)
        self.strings = strings
        self.exist = exist
        self.kept = list(kept) if kept is not None else [True] * len(self.types)
        self.depth = sum(self.kept[:exist])  # the oracle's levels
        self.parts: list[tuple[NDArray[np.int64], ...]] = []  # coded regions, as given
        self.plain: list[tuple[tuple[Any, ...], Any, Any]] = []
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def coded(self, ctx: NDArray[np.int64], lo: NDArray[np.int64],
              hi: NDArray[np.int64]) -> None:
        """Regions of coded contexts (the values of the levels before theirs) and ends."""
        self.parts.append((ctx, lo, hi))
        self.count += len(lo)

    def values(self, prefix: tuple[Any, ...], lo: Any, hi: Any) -> None:
        """A region of values (coded with the others, by ``flat``)."""
        self.plain.append((prefix, lo, hi))
        self.count += 1

    def _levels(self, ctx: NDArray[np.int64], lo: NDArray[np.int64], hi: NDArray[np.int64]
                ) -> tuple[NDArray[np.int64], ...]:
        """Coded regions on the oracle's levels: (fixed levels, their values, lo, hi)."""
        m, width = ctx.shape
        fixed = min(width, self.exist)
        if width >= self.exist or not self.kept[width]:
            lo = np.full(m, kernels.BOT, np.int64)
            hi = np.full(m, kernels.TOP, np.int64)
        levels = [p for p in range(fixed) if self.kept[p]]
        vals = np.zeros((m, self.depth), np.int64)
        vals[:, : len(levels)] = ctx[:, levels] if len(levels) < fixed else ctx[:, :fixed]
        return np.full(m, len(levels), np.int64), vals, lo, hi

    def flat(self) -> tuple[NDArray[np.int64], ...]:
        """The oracle's flat trie (``deltalog.engine.ivm.kernels.build_oracle``);
        ``NotColumnar`` when a region of values has no code."""
        parts = [self._levels(*part) for part in self.parts]
        by_width: dict[int, list[tuple[tuple[Any, ...], Any, Any]]] = {}
        for region in self.plain:
            by_width.setdefault(min(len(region[0]), self.exist), []).append(region)
        for width, regions in by_width.items():
            if width >= self.exist or not self.kept[width]:
                prefixes = [r[0][:width] for r in regions]
                lo = [BOTTOM] * len(regions)
                hi = [TOP] * len(regions)
            else:
                prefixes = [r[0] for r in regions]
                lo = [r[1] for r in regions]
                hi = [r[2] for r in regions]
            ctx = code_columns(prefixes, self.types[:width], self.strings)
            if ctx is None:
                raise NotColumnar("a region with no code")
            typ = self.types[width] if width < len(self.types) else "int"
            parts.append(self._levels(ctx, _end_codes(lo, typ, self.strings),
                                      _end_codes(hi, typ, self.strings)))
        plen, vals, lo_, hi_ = (np.concatenate(c) for c in zip(*parts, strict=True))
        return build_oracle(plen, vals, lo_, hi_)  # type: ignore[no-any-return]

    def change_oracle(self) -> OracleNode:
        """The same regions as the tuple join's change oracle (in values, on every level
        of the rule's order), for a commit the compiled join cannot evaluate after all."""
        oracle = ChangeOracle()
        e = self.exist

        def region(prefix: tuple[Any, ...], lo: Any, hi: Any) -> None:
            if len(prefix) >= e:
                oracle.add_subtree(prefix[:e])
            else:
                oracle.add(prefix, lo, hi)

        for ctx, lo, hi in self.parts:
            width = ctx.shape[1]
            typ = self.types[width] if width < len(self.types) else "int"
            cols = [_values(np.ascontiguousarray(ctx[:, j]), self.types[j], self.strings)
                    for j in range(width)]
            for k, prefix in enumerate(zip(*cols, strict=True) if width else [()] * len(lo)):
                region(tuple(prefix), self._end_value(int(lo[k]), typ),
                       self._end_value(int(hi[k]), typ))
        for prefix, lo, hi in self.plain:
            region(prefix, lo, hi)
        return oracle.finish()

    def _end_value(self, code: int, typ: str) -> Any:
        """The value of an interval end's code (``BOT``/``TOP``: ``BOTTOM``/``TOP``)."""
        if code == kernels.BOT:
            return BOTTOM
        if code == kernels.TOP:
            return TOP
        return _values(np.array([code], np.int64), typ, self.strings)[0]
