"""Maintenance of one rule body (Veldhuizen 2014, §4): sensitivity indices built while evaluating,
then per commit: tree surgery on every changed body relation, matched against the
indices (matched intervals are removed), the union of the matched regions as the change
oracle, the old and the new body evaluated under the same oracle, and their difference.

The unit of a body is a satisfying assignment, cut at the plan's existential level: with
short-circuit evaluation (§2.2.1) one witness stands for all assignments that agree on the
variables before that level, so oracle regions on existential variables are widened to
the whole subtree of their non-existential prefix.

A body ``t(x̄), !s(x̄)`` with S ⊆ T guaranteed (``complement_pairs``) reads T \\ S through
one complement atom (Veldhuizen 2014, §3.1.2): its intervals are recorded like any atom's, and a
commit stabs them with the tree surgery of the complement's own delta, which a change to
either t or s makes (a row of T \\ S can appear at any depth when a deeper row of t is
inserted or of s erased, so t's and s's own surgeries would not do).
"""

from collections.abc import Callable, Collection, Mapping
from collections.abc import Set as AbstractSet
from functools import partial
from typing import Any

import numpy as np

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.columnar.encoding import NotColumnar
from deltalog.engine.columnar.versions import (
    CodedIndex,
    code_columns,
    coded_index,
    difference_index,
)
from deltalog.engine.ivm.coded_intervals import CodedIntervals
from deltalog.engine.ivm.compiled import (
    CommitJoin,
    LoadCoding,
    Regions,
    Unit,
    changes_prefix,
    probe_layout,
    record_body,
)
from deltalog.engine.ivm.interval_index import IntervalIndex
from deltalog.engine.ivm.kernels import absent_depths
from deltalog.engine.ivm.lftj import Emit, IndexKey, JoinRun, Recorder
from deltalog.engine.ivm.oracle import ChangeOracle, OracleNode
from deltalog.engine.ivm.surgery import Surgery, surgery_at, tree_surgery
from deltalog.engine.join.complement import Complement
from deltalog.engine.join.plan import (
    Env,
    RulePlan,
    build_plan,
    complement_pairs,
    negation_perm,
    prepare,
)
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.engine.storage import RelationStore, SortedRows, VersionedRelation, permute
from deltalog.engine.syntax.ast import Rule
from deltalog.engine.values import Row


class WorkCounters:
    """What maintenance did, beyond iterator operations."""

    def __init__(self) -> None:
        self.surgeries = 0
        self.intervals_matched = 0
        self.intervals_added = 0
        self.oracle_regions = 0
        self.units_evaluated = 0
        self.compiled_rules = 0  # rules whose first evaluation the compiled join recorded
        self.compiled_commits = 0  # rule commits evaluated inside the oracle on it

    def as_dict(self) -> dict[str, int]:
        return {
            "surgeries": self.surgeries,
            "intervals_matched": self.intervals_matched,
            "intervals_added": self.intervals_added,
            "oracle_regions": self.oracle_regions,
            "units_evaluated": self.units_evaluated,
            "compiled_rules": self.compiled_rules,
            "compiled_commits": self.compiled_commits,
        }


class RuleMaintainer:
    """One rule: its plan (variable order fixed at load), sensitivity indices, and
    ``maintain`` giving the units that left and joined the body."""

    def __init__(
        self,
        rule: Rule,
        store: RelationStore,
        order: tuple[str, ...] | None = None,
        index_every_atom: bool = False,
        paper_trace: bool = False,
        supersets: Mapping[str, AbstractSet[str]] | None = None,
    ):
        """``supersets[s]``: relations that contain s whatever the data (from
        ``deltalog.engine.analysis.containment.supersets``); where given, ``t(x̄), !s(x̄)`` reads
        T \\ S by counting instead of probing s per row of t."""
        self.paper_trace = paper_trace
        self.rule = rule
        self.prep = prepare(rule)
        sizes = {a.index: len(store[a.pred]) for a in self.prep.atoms}
        self._run: JoinRun | None = None
        # Complement atoms: atom index -> the negation index it absorbs.
        self.complements = complement_pairs(self.prep, supersets or {})
        self.plan: RulePlan = build_plan(self.prep, sizes, self._probe, order,
                                         complements=self.complements)
        order_ = self.plan.order
        # No sensitivity index for an atom whose variables are a prefix of the order
        # (§4.2): a change to it maps straight to a point region.
        self.indexed = [
            index_every_atom or tuple(a.vars[c] for c in perm) != order_[: len(a.vars)]
            for a, perm in zip(self.prep.atoms, self.plan.perms, strict=True)
        ]
        self.indices: dict[IndexKey, IntervalIndex] = {}
        self.recorded_by = ""  # which join recorded the first evaluation (``initialize``)
        # Commits on the compiled join (``CommitJoin``), the reason they are not, or None:
        # not decided yet (built at the first commit that has the program).
        self._commit: CommitJoin | str | None = None
        # Complement atom -> T \ S as a coded index, for commits on the compiled join
        # (kept with the state; dropped when a commit runs on the tuple join instead).
        self._ccoded: dict[int, CodedIndex] = {}
        self.last_oracle: OracleNode | None = None  # the last commit's oracle (for tests)
        absorbed = set(self.complements.values())
        self.negated = {(n.pred, negation_perm(n, set(self.plan.order)))
                        for k, n in enumerate(self.prep.negations) if k not in absorbed}
        self.inputs = {a.pred for a in self.prep.atoms} | {n.pred for n in self.prep.negations}
        # A commit on the compiled join leaves the intervals of the negations with no
        # variable bound (probed once, before the join) as they were: a change to their
        # prefix re-evaluates the whole rule there. True once one did, until the tuple
        # join, which trusts those intervals, covers them (``_cover_once``).
        self._once_stale = False
        # Whether a commit on the tuple join recorded into the indices since the load (its
        # intervals may sit in parts on tuples, which a compiled commit does not stab;
        # before one did, the only parts on tuples are the load's probes of negations with
        # no variable bound, which it does not need).
        self._tuple_recorded = False

    # -- persistence: plans hold closures; keep the order, rebuild the plan ------------------
    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("prep", "plan", "_run", "last_oracle", "_commit")}
        state["order"] = self.plan.order
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        order = state.pop("order")
        state.setdefault("complements", {})  # saved before complement iteration existed
        state.setdefault("recorded_by", "tuples")
        state.setdefault("_ccoded", {})  # saved before complements committed on codes
        state.setdefault("_once_stale", state["recorded_by"] == "compiled")  # (not known)
        state.setdefault("_tuple_recorded", True)  # (not known)
        self.__dict__.update(state)
        self._run = None
        self._commit = None
        self.last_oracle = None
        self.prep = prepare(self.rule)
        self.plan = build_plan(self.prep, {}, self._probe, order, complements=self.complements)

    # -- plumbing -----------------------------------------------------------------------
    def _probe(self, pred: str, perm: tuple[int, ...], prefix: tuple[Any, ...]) -> bool:
        assert self._run is not None
        return self._run.probe(pred, perm, prefix)

    def _complement(self, store: RelationStore, atom: int, stats: JoinStats) -> Complement:
        """T \\ S for complement atom ``atom``, in the atom's column order."""
        neg = self.prep.negations[self.complements[atom]]
        return Complement(store[self.prep.atoms[atom].pred], store[neg.pred],
                          self.plan.perms[atom], stats)

    def _evaluate(self, store: RelationStore, old: bool, oracle: Any, record: bool,
                  stats: JoinStats, counters: WorkCounters,
                  complements: Mapping[int, Complement] | None = None) -> dict[Unit, Env]:
        def rows(pred: str, perm: tuple[int, ...]) -> SortedRows:
            rel = store[pred]
            return rel.previous(perm) if old else rel.current(perm)

        sources: list[SortedRows] = []
        for a, perm in zip(self.prep.atoms, self.plan.perms, strict=True):
            if a.index in self.complements:
                c = (complements or {}).get(a.index) or self._complement(store, a.index, stats)
                sources.append(c.previous() if old else c.current())
            else:
                sources.append(rows(a.pred, perm))
        recorder = Recorder(self.indexed) if record else None
        run = JoinRun(self.plan, sources, rows, stats, recorder, self.paper_trace)
        self._run = run
        units: dict[Unit, Env] = {}

        def emit(unit: Unit, env: Env) -> None:
            units[unit] = dict(env)

        cb: Emit = emit
        try:
            run.run(cb, oracle)
        finally:
            self._run = None
        counters.units_evaluated += len(units)
        if recorder is not None:
            for key, intervals in recorder.pending.items():
                tree = self.indices.get(key)
                if tree is None:
                    tree = self.indices[key] = IntervalIndex()
                tree.add_many(intervals)
                counters.intervals_added += len(intervals)
        return units

    # -- the two entry points -----------------------------------------------------------
    def initialize(self, store: RelationStore, stats: JoinStats, counters: WorkCounters,
                   prog: AnalyzedProgram | None = None,
                   coding: LoadCoding | None = None) -> Mapping[Unit, Env]:
        """Evaluate the whole body over the current versions, recording sensitivities: on
        the compiled join when ``prog`` is given and the rule allows it
        (``deltalog.engine.ivm.compiled``; ``recorded_by`` says which join recorded), over
        ``coding``'s relations when given (coded once for every rule of the load)."""
        if prog is not None:
            try:
                if self.paper_trace:
                    raise NotColumnar("the paper's trace is asked for")
                got = record_body(self.plan, self.indexed, prog, store, stats, coding)
            except NotColumnar as why:
                self.recorded_by = f"tuples: {why}"
            else:
                self.recorded_by = "compiled"
                commit = self.commit_join(prog, store)
                if type(commit) is CommitJoin:
                    # The indexes its commits read, as codes from the load's; the sorted
                    # indexes of tuples only if a commit falls back to the tuple join
                    # (``VersionedRelation.index`` builds one when first asked).
                    for pred, perm in commit.relations():
                        if store[pred].coded(perm) is None:
                            store[pred].keep_coded(perm, got.coded(pred, perm))
                    for a, k in self.complements.items():
                        perm = self.plan.perms[a]
                        self._ccoded[a] = difference_index(
                            got.coded(self.prep.atoms[a].pred, perm),
                            got.coded(self.prep.negations[k].pred, perm))
                else:
                    # The sorted indexes the tuple join's commits read: built now, with
                    # the state they belong to, not by the first commit (which would also
                    # save them whole).
                    complemented = [(self.prep.negations[k].pred, self.plan.perms[a])
                                    for a, k in self.complements.items()]  # (S, as T is read)
                    for pred, perm in [*((a.pred, perm) for a, perm in zip(
                            self.prep.atoms, self.plan.perms, strict=True)), *self.negated,
                                       *complemented]:
                        store[pred].index_from(perm, partial(got.sorted_rows, pred, perm))
                for key, parts in got.parts.items():
                    index = self.indices[key] = IntervalIndex()
                    for part in parts:  # (negations probed alike: a part per layout)
                        index.add_static(part)
                for key, records in got.plain.items():
                    self.indices.setdefault(key, IntervalIndex()).add_many(records)
                counters.intervals_added += got.added
                counters.units_evaluated += len(got.units)
                counters.compiled_rules += 1
                return got.units
        else:
            self.recorded_by = "tuples"
        return self._evaluate(store, False, None, True, stats, counters)

    def commit_join(self, prog: AnalyzedProgram | None, store: RelationStore | None = None
                    ) -> "CommitJoin | str":
        """The compiled join of this rule's commits, or why there is none (decided once
        per process: it is not saved; built again when the store's dictionary of string
        codes was relabelled since). Without ``store``, a rule over strings has no
        dictionary to code them by: the answer is not kept."""
        commit = self._commit
        if type(commit) is CommitJoin and store is not None and commit.stale():
            commit = None
        if commit is None and prog is not None:
            if self.recorded_by != "compiled":
                commit = "tuples: the first evaluation was recorded on tuples"
            else:
                try:
                    commit = CommitJoin(self.plan, self.indexed, prog,
                                        store.strings if store is not None else None)
                except NotColumnar as why:
                    commit = f"tuples: {why}"
                else:
                    # (the probes of a negation with no variable bound, made once before
                    # the join, are not stabbed by a compiled commit: a change to their
                    # prefix re-evaluates the whole rule; their index may be on tuples,
                    # and so may a part of an index they share with negations probed
                    # alike, until a commit on the tuple join records into it)
                    once = {key for key, _, _, j, _ in commit.negs if j < 0} - {
                        key for key, _, _, j, _ in commit.negs if j >= 0}
                    if self._tuple_recorded and any(type(part.static) is not CodedIntervals
                           for key, index in self.indices.items() if key not in once
                           for part in index.each() if part.static is not None):
                        commit = "tuples: an index on tuples"
            if store is None and type(commit) is not CommitJoin:
                return commit
            self._commit = commit
        return self._commit or "tuples: no program"

    def _coded_versions(self, store: RelationStore, commit: CommitJoin) -> bool:
        """Whether every index the compiled join reads is kept as codes: one kept since
        the load, or made now from the sorted index (a state saved before codes were
        kept; once), unless the relation met a value with no code."""
        for pred, perm in commit.relations():
            rel = store[pred]
            if rel.coded(perm) is not None:
                continue
            if rel.coded_refused(perm):
                return False
            delta = rel.delta()
            rel.keep_coded(perm, coded_index(
                commit.column_types(pred, perm), rel.index(perm),
                [permute(r, perm) for r, w in delta.items() if w > 0],
                [permute(r, perm) for r, w in delta.items() if w < 0], store.strings))
            if rel.coded(perm) is None:
                return False
        return True

    @staticmethod
    def _surgeries(store: RelationStore, counters: WorkCounters,
                   commit: CommitJoin | None = None
                   ) -> Callable[[str, tuple[int, ...]], list[Surgery]]:
        """``ops(pred, perm)``: the tree surgery of ``pred``'s last commit in ``perm`` order
        (made once per commit and column order). With ``commit`` (a compiled commit, whose
        relations keep coded indexes) where each changed row's surgery starts is found on
        the coded index's two versions (one compiled search per version), not by prefix
        searches on the sorted ones."""
        surgeries: dict[tuple[str, tuple[int, ...]], list[Surgery]] = {}

        def ops(pred: str, perm: tuple[int, ...]) -> list[Surgery]:
            got = surgeries.get((pred, perm))
            if got is None:
                rel = store[pred]
                if commit is None:
                    delta = [(permute(r, perm), w) for r, w in rel.delta().items()]
                    got = tree_surgery(delta, rel.previous(perm), rel.current(perm))
                else:
                    got = _coded_surgery(rel, perm, commit)
                surgeries[(pred, perm)] = got
                counters.surgeries += len(got)
            return got

        return ops

    def _cover_once(self) -> None:
        """Before the tuple join commits a rule whose last commits ran on the compiled
        join: the intervals of its negations with no variable bound are as the compiled
        join left them (the load's, or fewer), not as the tuple join would have recorded
        them. So the next change to any of those relations re-evaluates the whole rule (a
        "whole" interval each, taken by that change), which records them anew."""
        for neg in self.plan.probed_once():
            self.indices.setdefault(("whole", neg.pred), IntervalIndex()).add_many(
                [((), BOTTOM, TOP, None)])
        self._once_stale = False

    def _maintain_compiled(
        self, store: RelationStore, changed: Collection[str], stats: JoinStats,
        counters: WorkCounters, commit: CommitJoin, prog: AnalyzedProgram,
    ) -> tuple[dict[Unit, Env], dict[Unit, Env]]:
        """``maintain`` on codes: each index stabbed once with every point of the commit's
        surgeries, the oracle built from the coded regions, the old and new body
        evaluated inside it on the compiled join, the new one's intervals kept as parts
        on arrays."""
        self._once_stale = True
        complemented = self._complement_versions(store, commit)
        if complemented is None:  # (a row of T \ S with no code: the tuple join's commit)
            self._commit = "tuples: a value with no 64-bit code in a complement atom"
            return self._maintain_tuples(store, changed, stats, counters)
        if commit.stale():  # (new strings relabelled the store's codes: built again)
            got = self.commit_join(prog, store)
            if type(got) is not CommitJoin:
                return self._maintain_tuples(store, changed, stats, counters)
            commit = got
        # (from here on no string is given a code: the codes below stay the indexes')
        ops = self._surgeries(store, counters, commit)
        regions = Regions(commit.types, self.plan.exist_level, commit.kept, commit.strings)
        for a, perm, indexed in zip(self.prep.atoms, self.plan.perms, self.indexed,
                                    strict=True):
            if a.index in complemented:
                atom_ops = complemented[a.index][1]
                counters.surgeries += len(atom_ops)
            elif a.pred not in changed:
                continue
            elif not a.vars:  # () came or went: the whole body is in or out
                regions.values((), BOTTOM, TOP)
                continue
            else:
                atom_ops = ops(a.pred, perm)
            if not indexed:  # the atom's variables are the first of the order
                for op in atom_ops:
                    regions.values(op.path[: op.depth], op.path[op.depth], op.path[op.depth])
                continue
            types = commit.column_types(a.pred, perm)
            by_depth: dict[int, list[tuple[Any, ...]]] = {}
            for op in atom_ops:
                by_depth.setdefault(op.depth, []).append(op.path)
            for d, paths in by_depth.items():
                tree = self.indices.get(("atom", a.index, d))
                if tree is None:
                    continue
                coded = code_columns(paths, types[: d + 1], store.strings)
                if coded is None:  # (a coded relation's rows all have codes)
                    raise AssertionError(f"a row of {a.pred} with no code")
                found, plain = tree.stab_codes(
                    np.ascontiguousarray(coded[:, :d]), np.ascontiguousarray(coded[:, d]),
                    [p[:d] for p in paths], [p[d] for p in paths])
                for ctx, lo, hi in found:
                    counters.intervals_matched += len(lo)
                    regions.coded(ctx, lo, hi)
                for lo, hi, rule_prefix in plain:
                    counters.intervals_matched += 1
                    regions.values(rule_prefix, lo, hi)
        stabbed = set()
        for key, pred, perm, j, spec in commit.negs:
            if j < 0:  # probed once, before the join: a change to its prefix flips it
                if pred in changed and changes_prefix(
                        store, pred, perm, spec,
                        commit.column_types(pred, perm) if spec else []):
                    regions.values((), BOTTOM, TOP)
                continue
            # a probe's interval is its prefix's point: the region is the binding's
            # values before the probe's level and its value there (the payload, split);
            # negations probed alike share the index, each layout's probes a part of
            # their own (stabbed once for all the negations coded alike)
            layout = probe_layout(commit.types, j, spec, commit.value)
            tree = self.indices.get(key)
            if pred not in changed or tree is None or (key, layout) in stabbed:
                continue
            stabbed.add((key, layout))
            tree = tree.of_layout(layout, make=False)
            if tree is None:
                continue
            d = len(spec) - 1
            paths = [op.path for op in ops(pred, perm) if op.depth == d]
            coded = code_columns(paths, commit.column_types(pred, perm)[: d + 1],
                                 store.strings)
            if coded is None:
                raise AssertionError(f"a row of {pred} with no code")
            pick = np.ones(len(paths), np.bool_)  # the bucket's constants agree
            for c, (kind, ref, _) in enumerate(spec[:-1]):
                if kind == 1:
                    pick &= coded[:, c] == ref
            if not pick.any():
                continue
            coded = coded[pick]
            paths = [p for p, k in zip(paths, pick.tolist(), strict=True) if k]
            bcols = [c for c, (kind, _, _) in enumerate(spec[:-1]) if kind == 0]
            found, plain = tree.stab_codes(
                np.ascontiguousarray(coded[:, bcols]), np.ascontiguousarray(coded[:, d]),
                [p[:d] for p in paths], [p[d] for p in paths])
            for ctx, _, _ in found:
                counters.intervals_matched += len(ctx)
                last = np.ascontiguousarray(ctx[:, -1])
                regions.coded(np.ascontiguousarray(ctx[:, :-1]), last, last.copy())
            for _, _, (rule_prefix, x) in plain:
                counters.intervals_matched += 1
                regions.values(rule_prefix, x, x)
        if not len(regions):
            return {}, {}
        counters.oracle_regions += len(regions)
        sources = {a: index for a, (index, _) in complemented.items()}
        try:
            oracle = regions.flat()
            old, _, _ = commit.evaluate(store, oracle, True, False, stats, sources)
            new, batches, added = commit.evaluate(store, oracle, False, True, stats, sources)
        except NotColumnar as why:
            # A value the codes cannot hold (an arithmetic result beyond 64 bits): the
            # stabs' regions re-evaluated on the tuple join, as its commits would, and
            # this rule's commits stay there from now on.
            self._commit = f"tuples: {why}"
            self._ccoded = {}
            root = regions.change_oracle()
            self.last_oracle = root
            return (self._evaluate(store, True, root, False, stats, counters),
                    self._evaluate(store, False, root, True, stats, counters))
        for key, batch in batches:
            index = self.indices.get(key)
            if index is None:
                index = self.indices[key] = IntervalIndex()
            index.add_batch(batch, commit.strings)
        counters.intervals_added += added
        counters.units_evaluated += len(old) + len(new)
        counters.compiled_commits += 1
        return old, new

    def maintain(
        self, store: RelationStore, changed: Collection[str], stats: JoinStats,
        counters: WorkCounters, prog: AnalyzedProgram | None = None,
    ) -> tuple[dict[Unit, Env], dict[Unit, Env]]:
        """The units of the old and of the new body inside the change oracle of this
        commit; ``changed`` names the relations with a non-empty delta. With ``prog``, on
        the compiled join where the rule allows it (``deltalog.engine.ivm.compiled``)."""
        commit = self.commit_join(prog, store)
        if type(commit) is CommitJoin and self._coded_versions(store, commit):
            assert prog is not None
            return self._maintain_compiled(store, changed, stats, counters, commit, prog)
        return self._maintain_tuples(store, changed, stats, counters)

    def _complement_versions(self, store: RelationStore, commit: CommitJoin
                             ) -> dict[int, tuple[CodedIndex, list[Surgery]]] | None:
        """Each complement atom's T \\ S as a coded index in the two versions this commit
        reads, with its tree surgery: the rows of the commit's changes to T and S whose
        membership in T \\ S changed (T \\ S made from the store once when not kept); None
        when one has no code."""
        out: dict[int, tuple[CodedIndex, list[Surgery]]] = {}
        for a, k in self.complements.items():
            t, s = store[self.prep.atoms[a].pred], store[self.prep.negations[k].pred]
            perm = self.plan.perms[a]
            dt, ds = t.delta(), s.delta()
            changes: list[tuple[Row, int]] = []
            for r in dt.keys() | ds.keys():
                in_t, in_s = r in t, r in s
                # (a row the last commit erased was there before; one it inserted was not)
                was = (in_t if r not in dt else dt[r] < 0) and not (
                    in_s if r not in ds else ds[r] < 0)
                now = in_t and not in_s
                if was != now:
                    changes.append((permute(r, perm), 1 if now else -1))
            types = commit.column_types(self.prep.atoms[a].pred, perm)
            ins = [r for r, w in changes if w > 0]
            era = [r for r, w in changes if w < 0]
            index = self._ccoded.get(a)
            if index is None:
                rows = sorted(permute(r, perm) for r in t.rows if r not in s)
                index = coded_index(types, rows, ins, era, store.strings)
            elif not index.commit(ins, era):
                index = None
            if index is None:
                self._ccoded = {}
                return None
            self._ccoded[a] = index
            changes.sort()
            out[a] = (index, _surgery_of(changes, index, types))
        return out

    def _maintain_tuples(
        self, store: RelationStore, changed: Collection[str], stats: JoinStats,
        counters: WorkCounters,
    ) -> tuple[dict[Unit, Env], dict[Unit, Env]]:
        """``maintain`` on the tuple join (``deltalog.engine.ivm.lftj``)."""
        self._ccoded = {}  # (not kept up to date by this commit)
        if self._once_stale:
            self._cover_once()
        self._tuple_recorded = True
        oracle = ChangeOracle()
        e = self.plan.exist_level

        def region(prefix: tuple[Any, ...], lo: Any, hi: Any) -> None:
            if len(prefix) >= e:  # widen regions on existential variables
                oracle.add_subtree(prefix[:e])
            else:
                oracle.add(prefix, lo, hi)

        complements: dict[int, Complement] = {}
        ops = self._surgeries(store, counters)

        for a, perm, indexed in zip(self.prep.atoms, self.plan.perms, self.indexed,
                                    strict=True):
            k = self.complements.get(a.index)
            if k is None:
                if a.pred not in changed:
                    continue
                if not a.vars:  # () came or went: the whole body is in or out
                    oracle.add_subtree(())
                    continue
                atom_ops = ops(a.pred, perm)
            else:
                if a.pred not in changed and self.prep.negations[k].pred not in changed:
                    continue
                c = complements[a.index] = self._complement(store, a.index, stats)
                atom_ops = tree_surgery(c.delta(), c.previous(), c.current())
                counters.surgeries += len(atom_ops)
            for op in atom_ops:
                d = op.depth
                path = op.path
                if not indexed:
                    region(path[:d], path[d], path[d])
                    continue
                tree = self.indices.get(("atom", a.index, d))
                if tree is None:
                    continue
                for lo, hi, rule_prefix in tree.stab(path[:d], path[d]):
                    counters.intervals_matched += 1
                    region(rule_prefix, lo, hi)
        for pred, perm in self.negated:
            if pred not in changed:
                continue
            whole = self.indices.get(("whole", pred))
            if whole is not None and len(whole):
                counters.intervals_matched += len(whole)
                self.indices.pop(("whole", pred))
                oracle.add_subtree(())
            for op in ops(pred, perm):
                d = op.depth
                tree = self.indices.get(("neg", pred, perm, d))
                if tree is None:
                    continue
                for _, _, payload in tree.stab(op.path[:d], op.path[d]):
                    counters.intervals_matched += 1
                    if payload is None:
                        oracle.add_subtree(())
                    else:
                        rule_prefix, x = payload
                        region(rule_prefix, x, x)
        if not oracle:
            return {}, {}
        counters.oracle_regions += oracle.regions
        root = oracle.finish()
        self.last_oracle = root
        old = self._evaluate(store, True, root, False, stats, counters, complements)
        new = self._evaluate(store, False, root, True, stats, counters, complements)
        return old, new


def _coded_surgery(rel: VersionedRelation, perm: tuple[int, ...],
                   commit: CommitJoin) -> list[Surgery]:
    """The tree surgery of ``rel``'s last commit in ``perm`` order, each changed row's
    start found on its coded index's versions (``kernels.absent_depths``)."""
    index = rel.coded(perm)
    if index is None:  # (``_coded_versions`` checked)
        raise AssertionError(f"{rel.name} has no coded index for its change")
    rows = sorted((permute(r, perm), w) for r, w in rel.delta().items())
    return _surgery_of(rows, index, commit.column_types(rel.name, perm))


def _surgery_of(rows: list[tuple[Row, int]], index: Any, types: list[str]) -> list[Surgery]:
    """The tree surgery of changed ``rows`` (sorted, with weights) of ``index`` (coded,
    in two versions), each row's start found on its versions."""
    codes = code_columns([r for r, _ in rows], types, index.strings)
    if codes is None:  # (an index's rows all have codes)
        raise AssertionError("a changed row with no code")
    inserted = np.array([w > 0 for _, w in rows], np.bool_)
    depths = np.zeros(len(rows), np.int64)
    for old, pick in ((True, inserted), (False, ~inserted)):
        # (an insertion's branch is new against the version before, an erasure's against
        # the one after)
        if pick.any():
            depths[pick] = absent_depths(  # type: ignore[call-arg]
                *index.version(old), np.ascontiguousarray(codes[pick]))
    return surgery_at(rows, depths.tolist())
