"""Sensitivity-index maintenance of one non-recursive stratum (Veldhuizen 2014, §2 and §4):
every rule maintained by its change oracle, heads by support counts, aggregates by group
state, functional heads checked for a second value per key.

Recursive strata are maintained the DBSP way (``deltalog.engine.dbsp``); asking this class for one
is an error.
"""

from collections import Counter, defaultdict
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.analysis.containment import supersets
from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.analysis.typecheck import uncast
from deltalog.engine.columnar.encoding import NotColumnar
from deltalog.engine.dbsp.aggregates import GroupArrays, groups_reason
from deltalog.engine.dbsp.columnar import (
    TYPES,
    CodedRows,
    SharedCoding,
    _Counts,
    _distinct,
    _RowCoding,
    _sum_by_key,
    natural,
)
from deltalog.engine.errors import NOT_SUPPORTED, DataError, NotSupportedError
from deltalog.engine.exact_sum import group_out_of_range
from deltalog.engine.heads import functional_conflict, head_projection
from deltalog.engine.ivm.aggregates import GroupAggregates
from deltalog.engine.ivm.compiled import LoadCoding, UnitColumns
from deltalog.engine.ivm.rule import RuleMaintainer, Unit, WorkCounters
from deltalog.engine.join.plan import Env
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.segments import PAGED_MIN, PagedDict, PagedMapping
from deltalog.engine.semantics import coerce
from deltalog.engine.storage import Delta, RelationStore
from deltalog.engine.syntax.ast import Var
from deltalog.engine.values import Row


class _RuleHead:
    """How one rule's units become contributions (support) to head rows."""

    # An aggregate rule's groups on arrays: the stratum's ``GroupArrays`` and the rule's
    # index there (a state saved before them: None, its groups in ``agg``).
    arrays: tuple[GroupArrays, int] | None = None

    def __init__(self, prog: AnalyzedProgram, maintainer: RuleMaintainer,
                 arrays: tuple[GroupArrays, int] | None = None):
        rule = maintainer.rule
        self.maintainer = maintainer
        self.pred = rule.head.pred
        self.schema = prog.schemas[self.pred]
        self.project = head_projection(rule, self.schema)
        self.agg: GroupAggregates | None = None
        if arrays is not None:
            self.arrays = arrays
        elif rule.aggregate is not None:
            a = rule.aggregate
            self.agg = GroupAggregates(a.func, self.schema.columns[-1].type == "float")
            self.keys = rule.head.args[:-1]
            self.arg = a.arg.name if a.arg is not None else None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "project"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.project = head_projection(self.maintainer.rule, self.schema)

    def _columns_at(self, names: tuple[str, ...]) -> list[int] | None:
        """Where the head's arguments are among the units' variables, when the head is
        only variables, at least one, all among them, and no column needs a coercion
        (``head_projection``'s fast case); else None."""
        args = self.maintainer.rule.head.args
        if not args or any(c.type == "float" for c in self.schema.columns):
            return None
        if not all(isinstance(a, Var) and a.name in names for a in args):
            return None
        return [names.index(a.name) for a in args]  # type: ignore[union-attr]

    def group(self, env: Env) -> tuple[Any, ...]:
        return tuple(env[k.name] if isinstance(k, Var) else k.value for k in self.keys)

    def row(self, group: tuple[Any, ...], value: Any) -> Row:
        cols = self.schema.columns
        return tuple(coerce(v, c.type) for v, c in zip((*group, value), cols, strict=True))

    def columns(self, units: Mapping[Unit, Env]) -> list[list[Any]] | None:
        """The head rows of ``units`` (a load's) by column, a row per unit (rows repeat:
        each is a unit's support), when the units come as columns and the head is
        ``_columns_at``'s fast case; else None."""
        if self.maintainer.rule.aggregate is not None or type(units) is not UnitColumns:
            return None
        at = self._columns_at(units.names)
        return None if at is None else [units.columns[i] for i in at]

    def load_groups(self, units: Mapping[Unit, Env]) -> list[Any]:
        """(a load, groups on arrays) Every unit an assignment: the head's rows by column,
        one per non-empty group."""
        assert self.arrays is not None
        ga, i = self.arrays
        keys = self._assignments(units)
        slots = ga.add(i, keys, np.ones(len(keys), np.int64))
        return ga.head_columns(i, _distinct(slots))

    def _assignments(self, units: Mapping[Unit, Env]) -> NDArray[np.int64]:
        """The keys of ``units`` as assignments of the rule (``GroupArrays``' coding)."""
        assert self.arrays is not None
        ga, i = self.arrays
        coding, names = ga.assignment_coding(i), ga.assignment_vars(i)
        if not names:  # (a body of no variable: one assignment at most, the empty row)
            return np.zeros(len(units), np.int64)
        if type(units) is UnitColumns:
            return coding.encode_columns([units.columns[units.names.index(v)] for v in names])
        return coding.encode([tuple(env[v] for v in names) for env in units.values()])

    def contributions(self, old: Mapping[Unit, Env], new: Mapping[Unit, Env]) -> dict[Row, int]:
        """Support changes of head rows from the units that left (old only) and joined
        (new only) the body."""
        if self.arrays is not None:
            ga, i = self.arrays
            went = {u: e for u, e in old.items() if u not in new}
            came = {u: e for u, e in new.items() if u not in old}
            if not went and not came:
                return {}
            keys = np.concatenate([self._assignments(went), self._assignments(came)])
            return ga.change(i, keys, np.concatenate(
                [-np.ones(len(went), np.int64), np.ones(len(came), np.int64)]))
        agg = self.agg
        if agg is None and not old and type(new) is UnitColumns:
            at = self._columns_at(new.names)
            if at is not None:  # every head row at once: a column per head argument
                return Counter(zip(*[new.columns[i] for i in at], strict=True))
        out: dict[Row, int] = defaultdict(int)
        if agg is None:
            for unit, env in old.items():
                if unit not in new:
                    out[self.project(env)] -= 1
            for unit, env in new.items():
                if unit not in old:
                    out[self.project(env)] += 1
            return out
        touched: dict[tuple[Any, ...], Any] = {}
        changes: list[tuple[tuple[Any, ...], Unit, Any, int]] = []
        for unit, env in old.items():
            if unit not in new:
                changes.append((self.group(env), unit, env[self.arg] if self.arg else 0, -1))
        for unit, env in new.items():
            if unit not in old:
                changes.append((self.group(env), unit, env[self.arg] if self.arg else 0, 1))
        for g, _, _, _ in changes:
            if g not in touched:
                touched[g] = agg.result(g)
        # Erasures first, so a scan tree never holds one key twice.
        for g, unit, value, w in sorted(changes, key=lambda c: c[3]):
            agg.update(g, unit, value, w)
        for g, before in touched.items():
            try:
                after = agg.result(g)
            except DataError as err:
                raise group_out_of_range(err, self.pred, g) from None
            if before == after and type(before) is type(after):
                continue
            if before is not None:
                out[self.row(g, before)] -= 1
            if after is not None:
                out[self.row(g, after)] += 1
        return out


def _array_reason(prog: AnalyzedProgram, stratum: Stratum, pred: str) -> str | None:
    """Why the support counts of ``pred`` (of ``stratum``) cannot be kept on arrays
    (``_CodedSupport``; None: they can)."""
    schema = prog.schemas[pred]
    if not schema.columns:
        return "no column"
    for rule in stratum.rules:
        if rule.head.pred == pred and rule.aggregate is not None:
            reason = groups_reason(prog, rule)
            if reason is not None:
                return f"an aggregate's, whose groups are kept per group: {reason}"
    if any(c.type not in TYPES for c in schema.columns):
        return "a column that is not an int, float or string"
    return None


class _CodedSupport:
    """The support counts of one derived predicate on arrays: its rows coded by the
    engine's shared coding (``deltalog.engine.dbsp.columnar.SharedCoding``: the codes a
    columnar stratum reading them takes as they are) as natural keys, a count each
    (``_Counts``: sorted keys, a nursery for a commit's few). The relation goes to the
    store as ``CodedRows``; a commit's rows are coded, looked up and counted as arrays,
    and only the rows whose support crosses zero are made Python rows again (the head's
    delta)."""

    def __init__(self, coding: _RowCoding, functional: bool = False):
        """``functional``: the predicate's key is the high half of ``coding``'s layout
        (its first column in the natural layout; the group of its key's columns in a
        layout of two halves), and a key with two values is DL302."""
        self.coding = coding
        self.counts = _Counts(len(coding.types))
        self.functional = functional

    def load(self, keys: NDArray[np.int64], w: NDArray[np.int64]) -> None:
        """(a load) Add support ``w`` to the rows of keys ``keys`` (not sorted, repeated)."""
        if len(self.counts):  # (the program's facts of the predicate, loaded first)
            old = self.counts.facts()
            have, _ = self.counts.lookup(old)
            keys, w = np.concatenate([old, keys]), np.concatenate([have, w])
        k, c = _sum_by_key(keys, w)
        if (c < 0).any():
            raise AssertionError("negative support at a load")
        self.counts.load(k, c)

    def load_columns(self, columns: list[list[Any]]) -> None:
        """(a load) Support 1 for each row given by column (Python values; rows repeat)."""
        keys = self.coding.encode_columns(columns)
        self.load(keys, np.ones(len(keys), np.int64))

    def add(self, pred: str, contrib: Mapping[Row, int]) -> Delta:
        """Add support; rows whose support crosses zero make the head's delta."""
        rows = [r for r, w in contrib.items() if w]
        if not rows:
            return {}
        k, w = _sum_by_key(self.coding.encode(rows),
                           np.fromiter((contrib[r] for r in rows), np.int64, len(rows)))
        old, new, at = self.counts.change(pred, k, w)
        came, went = k[(old == 0) & (new > 0)], k[(old > 0) & (new == 0)]
        delta: Delta = dict.fromkeys(self.coding.decode(came), 1)
        delta.update(dict.fromkeys(self.coding.decode(went), -1))
        if self.functional:  # (before the counts change)
            self.counts.check_functional(pred, self.coding, came, went, delta)
        self.counts.update(k, old, new, at)
        return delta

    def check_load(self, pred: str) -> None:
        """(a load, functional) DL302 for the first key of two values."""
        keys = self.counts.facts()
        high = keys >> 32
        twice = np.flatnonzero(high[1:] == high[:-1])
        if len(twice):
            a, b = self.coding.decode(keys[twice[0]: twice[0] + 2])
            raise functional_conflict(pred, a, b)

    def rows(self) -> CodedRows:
        """The rows of positive support, as natural keys (what the store and the strata
        above read)."""
        coding, keys = self.coding, self.counts.facts()
        natural_layout = natural(len(coding.types))
        if coding.layout == natural_layout:
            return CodedRows(keys, coding)
        keys = np.sort(coding.packing.relayout(keys, coding.layout, natural_layout))
        return CodedRows(keys, _RowCoding(coding.types, coding.codes, coding.packing))

    def as_dict(self) -> dict[Row, int]:
        """(tests) Every row's support."""
        keys = self.counts.facts()
        counts, _ = self.counts.lookup(keys)
        return dict(zip(self.coding.decode(keys), counts.tolist(), strict=True))


class SensitivityStratum:
    """A non-recursive stratum maintained with sensitivity indices and a change oracle."""

    strategy = "sensitivity"

    # Predicates whose support counts are kept on arrays (``_CodedSupport``; a state saved
    # before them: none).
    coded: dict[str, _CodedSupport] = MappingProxyType({})  # type: ignore[assignment]
    # The groups of the aggregate rules whose predicates are coded (a state saved before
    # them: none).
    group_arrays: GroupArrays | None = None

    def __init__(self, prog: AnalyzedProgram, stratum: Stratum, compiled: bool = True,
                 coding: SharedCoding | None = None):
        """``compiled``: record each rule's first evaluation on the compiled join where the
        rule allows it (``deltalog.engine.ivm.compiled``), else on the tuple join.
        ``coding``: the codes the engine's columnar strata share; given (and ``compiled``),
        the support counts of each predicate of one column at least are kept on arrays
        in it (``_CodedSupport``), its relation goes to the store as coded rows, and its
        aggregate rules keep their groups on arrays (``GroupArrays``), unless
        ``_array_reason`` says why not."""
        if stratum.recursive:
            raise NotSupportedError(
                f"the sensitivity strategy maintains non-recursive strata only; "
                f"{', '.join(stratum.preds)} is recursive (use the dbsp or auto strategy)",
                None,
                NOT_SUPPORTED,
            )
        self.prog = prog
        self.stratum = stratum
        self.compiled = compiled
        self.preds = stratum.preds
        self.heads: list[_RuleHead] = []
        self.coded = {}
        # aggregate rules whose groups are on arrays (in the stratum's order)
        self.group_arrays: GroupArrays | None = None
        if compiled and coding is not None:
            for p in stratum.preds:
                schema = prog.schemas[p]
                if _array_reason(prog, stratum, p) is None:
                    # (a functional head's key in the high half, one group code)
                    k = schema.key_arity if schema.functional else 1
                    self.coded[p] = _CodedSupport(_RowCoding(
                        tuple(c.type for c in schema.columns), coding.codes,
                        coding.packing, (tuple(range(k)), tuple(range(k, schema.arity)))),
                        schema.functional)
            rules = tuple(r for r in stratum.rules if r.aggregate is not None
                          and r.head.pred in self.coded)
            if rules:
                self.group_arrays = GroupArrays(prog, Stratum(
                    tuple(dict.fromkeys(r.head.pred for r in rules)), rules,
                    recursive=False), coding)
        # Dicts, or ``PagedDict``s when opened from a segment store (see ``__getstate__``).
        self.support: dict[str, MutableMapping[Row, int]] = {
            p: {} for p in stratum.preds if p not in self.coded}
        self.work: dict[str, int] = {}
        # Functional heads: the present row of every key, to catch a second value.
        self.by_key: dict[str, MutableMapping[Row, Row]] = {
            p: {} for p in stratum.preds if prog.schemas[p].functional and p not in self.coded
        }

    def __getstate__(self) -> dict[str, Any]:
        """What a saved state keeps: the large support counts and functional heads' rows
        by key marked ``PagedMapping`` (in a segment store, runs read back as ``PagedDict``,
        of which a save writes the entries changed since the open)."""
        state = dict(self.__dict__)

        def paged(d: MutableMapping[Row, Any]) -> Any:
            return PagedMapping(d) if type(d) is PagedDict or len(d) >= PAGED_MIN else d

        state["support"] = {p: paged(d) for p, d in self.support.items()}
        state["by_key"] = {p: paged(d) for p, d in self.by_key.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.support = {p: PagedMapping.unwrap(d) for p, d in self.support.items()}
        self.by_key = {p: PagedMapping.unwrap(d) for p, d in self.by_key.items()}

    def initialize(self, store: RelationStore) -> dict[str, set[Row] | CodedRows]:
        stats, counters = JoinStats(), WorkCounters()
        for pred in self.preds:  # program facts of a derived predicate: permanent support
            self._add(pred, dict.fromkeys(self.prog.facts.get(pred, ()), 1))
        contained = supersets(self.prog)
        # Each rule with every variable read from columns of one type (``uncast``): the
        # tuple join and the compiled one bind and record alike.
        schemas = self.prog.schemas
        ga = self.group_arrays
        at = {} if ga is None else {id(r): i for i, r in enumerate(ga.rules)}
        self.heads = [_RuleHead(self.prog, RuleMaintainer(
            uncast(rule, lambda pred, i: schemas[pred].columns[i].type), store,
            supersets=contained), None if ga is None or id(rule) not in at else (
                ga, at[id(rule)])) for rule in self.stratum.rules]
        coding = None
        if self.compiled:  # the relations the rules read, coded once for all of them
            try:
                coding = LoadCoding(self.prog, store, [
                    h.maintainer.plan.prep for h in self.heads
                    if not h.maintainer.paper_trace])
            except NotColumnar:  # each rule's recording says why
                coding = None
        for head in self.heads:
            units = head.maintainer.initialize(store, stats, counters,
                                               self.prog if self.compiled else None, coding)
            coded = self.coded.get(head.pred)
            if head.arrays is not None and coded is not None:  # (groups on arrays)
                coded.load_columns(head.load_groups(units))
                continue
            if coded is not None:  # (a head of variables: its rows by column, no tuple)
                columns = head.columns(units)
                if columns is not None:
                    coded.load_columns(columns)
                    continue
            self._add(head.pred, head.contributions({}, units))
        for pred, coded in self.coded.items():
            if coded.functional:
                coded.check_load(pred)
        self.work = {**stats.as_dict(), **counters.as_dict()}
        out: dict[str, set[Row] | CodedRows] = {
            p: set(rows) for p, rows in self.support.items()}
        out.update({p: c.rows() for p, c in self.coded.items()})
        return out

    def mapping_reason(self, pred: str) -> str | None:
        """Why ``pred``'s support counts are kept in a Python mapping, not on arrays, for a
        run's notes (None: on arrays, or nothing to say: a predicate of no column, which
        holds one row at most, or the columnar kernel off, which the notes of the rules
        say)."""
        if pred in self.coded or not self.prog.schemas[pred].columns or not self.compiled:
            return None
        return _array_reason(self.prog, self.stratum, pred) or (
            "a state saved before they were kept on arrays")

    def support_of(self, pred: str) -> Mapping[Row, int]:
        """(tests) The support count of every row of ``pred``."""
        coded = self.coded.get(pred)
        return coded.as_dict() if coded is not None else self.support[pred]

    def apply(self, store: RelationStore, deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        stats, counters = JoinStats(), WorkCounters()
        changed = {name for name, d in deltas.items() if d}
        combined: dict[str, dict[Row, int]] = {p: defaultdict(int) for p in self.preds}
        for head in self.heads:
            m = head.maintainer
            if not changed & m.inputs:
                continue
            old, new = m.maintain(store, changed, stats, counters,
                                  self.prog if self.compiled else None)
            for row, w in head.contributions(old, new).items():
                combined[head.pred][row] += w
        out: dict[str, Delta] = {}
        for pred, contrib in combined.items():
            delta = self._add(pred, contrib)
            if delta:
                out[pred] = delta
        self.work = {**stats.as_dict(), **counters.as_dict()}
        return out

    def _add(self, pred: str, contrib: Mapping[Row, int]) -> Delta:
        """Add support; rows whose support crosses zero make the head's delta. A
        functional head takes its erasures first, then checks every new row's key."""
        coded = self.coded.get(pred)
        if coded is not None:
            return coded.add(pred, contrib)
        support = self.support[pred]
        delta: Delta = {}
        for row, w in contrib.items():
            if not w:
                continue
            before = support.get(row, 0)
            after = before + w
            if after < 0:
                raise AssertionError(f"negative support for {pred}{row}")
            if after:
                support[row] = after
            else:
                del support[row]
            if before == 0 and after > 0:
                delta[row] = 1
            elif before > 0 and after == 0:
                delta[row] = -1
        by_key = self.by_key.get(pred)
        if by_key is not None and delta:
            k = self.prog.schemas[pred].key_arity
            for row, w in delta.items():
                if w < 0 and by_key.get(row[:k]) == row:
                    del by_key[row[:k]]
            for row in sorted(r for r, w in delta.items() if w > 0):
                other = by_key.setdefault(row[:k], row)
                if other != row:
                    raise functional_conflict(pred, other, row)
        return delta

