"""Evaluate a program from scratch: stratum by stratum, leapfrog triejoin for every rule
body, semi-naive iteration for recursive strata.

``evaluate`` is the entry point (``deltalog eval``, the ``recompute`` strategy, lineage): it
runs the columnar core (``deltalog.engine.columnar``). ``Evaluator`` here is the same
algorithm on Python tuples, kept simple: the oracle the columnar core is tested against,
and what runs the rare program the columnar core cannot code.
"""

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from operator import itemgetter

from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.columnar.encoding import NotColumnar
from deltalog.engine.columnar.evaluate import Columns, evaluate_columns
from deltalog.engine.errors import no_fixpoint
from deltalog.engine.heads import aggregate_rows, check_functional, head_product, head_projection
from deltalog.engine.join.leapfrog import leapfrog_triejoin
from deltalog.engine.join.plan import Env, PreparedRule, build_plan, prepare
from deltalog.engine.join.trie import JoinStats, has_prefix
from deltalog.engine.semantics import coerce
from deltalog.engine.syntax.ast import Rule
from deltalog.engine.values import Row, Value


def sorted_rows(rows: Iterable[Row], perm: tuple[int, ...]) -> list[Row]:
    """``rows`` with columns in ``perm`` order, sorted lexicographically. One stable sort per
    column, last column first (least significant digit first): CPython compares single
    values much faster than whole tuples (for ints about 3x faster overall)."""
    if perm == tuple(range(len(perm))) or len(perm) == 1:
        out = list(rows)
    else:
        out = list(map(itemgetter(*perm), rows))
    for column in reversed(range(len(perm))):
        out.sort(key=itemgetter(column))
    return out


@dataclass
class Database:
    """Relations as sets, with sorted, column-permuted copies built on demand (the tries)."""

    relations: dict[str, set[Row]]
    _indexes: dict[tuple[int, tuple[int, ...]], list[Row]] = field(default_factory=dict)

    def index(self, rows: set[Row], perm: tuple[int, ...]) -> list[Row]:
        key = (id(rows), perm)
        cached = self._indexes.get(key)
        if cached is None:
            cached = sorted_rows(rows, perm)
            self._indexes[key] = cached
        return cached

    def invalidate(self, rows: set[Row]) -> None:
        for key in [k for k in self._indexes if k[0] == id(rows)]:
            del self._indexes[key]

    def probe(self, pred: str, perm: tuple[int, ...], prefix: tuple[Value, ...]) -> bool:
        return has_prefix(self.index(self.relations[pred], perm), prefix)


def run_rule(
    rule: Rule,
    prep: PreparedRule,
    db: Database,
    sources: Sequence[set[Row]],
    schema_cols: object,
    stats: JoinStats,
    order: Sequence[str] | None = None,
    fresh: AbstractSet[int] = frozenset(),
) -> list[Env] | set[Row]:
    """All satisfying assignments (aggregate rules) or head rows (other rules), where atom
    i of the body reads ``sources[i]``; ``fresh`` atoms read a delta, sorted for this join
    only."""
    sizes = {i: len(rows) for i, rows in enumerate(sources)}
    plan = build_plan(prep, sizes, db.probe, order, fresh)
    relations = [db.index(rows, plan.perms[i]) for i, rows in enumerate(sources)]
    if rule.aggregate is not None:
        envs: list[Env] = []
        leapfrog_triejoin(plan, relations, lambda env: envs.append(dict(env)), stats)
        return envs
    out: set[Row] = set()
    project = head_projection(rule, schema_cols)  # type: ignore[arg-type]
    add = out.add
    emit_many = head_product(rule, schema_cols, out)  # type: ignore[arg-type]
    leapfrog_triejoin(plan, relations, lambda env: add(project(env)), stats, emit_many)
    return out


class Evaluator:
    """Bottom-up evaluation with LFTJ; ``orders`` may fix the variable order per rule
    (used by tests that check every order gives the same result)."""

    def __init__(
        self,
        prog: AnalyzedProgram,
        orders: Mapping[int, Sequence[str]] | None = None,
        max_iterations: int | None = None,
    ):
        self.prog = prog
        self.max_iterations = max_iterations
        self.stats = JoinStats()
        self.orders = dict(orders or {})
        self._prepared: dict[int, PreparedRule] = {}

    def prepared(self, rule: Rule) -> PreparedRule:
        key = id(rule)
        if key not in self._prepared:
            self._prepared[key] = prepare(rule)
        return self._prepared[key]

    def _rule_output(
        self,
        rule: Rule,
        db: Database,
        sources: Sequence[set[Row]],
        fresh: AbstractSet[int] = frozenset(),
    ) -> set[Row]:
        schema = self.prog.schemas[rule.head.pred]
        result = run_rule(
            rule, self.prepared(rule), db, sources, schema, self.stats,
            self.orders.get(self._rule_number(rule)), fresh,
        )
        if rule.aggregate is not None:
            return aggregate_rows(rule, schema, result)  # type: ignore[arg-type]
        return result  # type: ignore[return-value]

    def _rule_number(self, rule: Rule) -> int:
        for i, r in enumerate(self.prog.program.rules):
            if r is rule:
                return i
        return -1

    def stratum(self, stratum: Stratum, db: Database) -> None:
        rels = db.relations
        own = set(stratum.preds)
        # Iteration 0: every rule over the current relations.
        new: dict[str, set[Row]] = {p: set() for p in stratum.preds}
        for rule in stratum.rules:
            atoms = self.prepared(rule).atoms
            sources = [rels[a.pred] for a in atoms]
            _union_into(new, rule.head.pred, self._rule_output(rule, db, sources))
        delta = {p: new[p] - rels[p] for p in stratum.preds}
        for p in stratum.preds:
            if delta[p]:
                rels[p] |= delta[p]
                db.invalidate(rels[p])
        if not stratum.recursive:
            return
        # Semi-naive: every new fact uses at least one fact new in the last round.
        recursive_rules = [
            r for r in stratum.rules if any(a.pred in own for a in self.prepared(r).atoms)
        ]
        iterations = 1
        while any(delta.values()):
            if self.max_iterations is not None and iterations >= self.max_iterations:
                raise no_fixpoint(stratum.preds, iterations)
            iterations += 1
            new = {p: set() for p in stratum.preds}
            for rule in recursive_rules:
                atoms = self.prepared(rule).atoms
                for i, atom in enumerate(atoms):
                    if atom.pred not in own or not delta[atom.pred]:
                        continue
                    sources = [rels[a.pred] for a in atoms]
                    sources[i] = delta[atom.pred]
                    _union_into(
                        new, rule.head.pred, self._rule_output(rule, db, sources, {i})
                    )
            for p in stratum.preds:
                db.invalidate(delta[p])
            delta = {p: new[p] - rels[p] for p in stratum.preds}
            for p in stratum.preds:
                if delta[p]:
                    rels[p] |= delta[p]
                    db.invalidate(rels[p])

    def run(
        self, inputs: Mapping[str, Iterable[Row]], preds: Iterable[str] | None = None
    ) -> dict[str, frozenset[Row]]:
        prog = self.prog
        rels: dict[str, set[Row]] = {name: set() for name in prog.schemas}
        for name, facts in prog.facts.items():
            rels[name] |= set(facts)
        for name, rows in inputs.items():
            if name not in rels:
                continue
            cols = prog.schemas[name].columns
            if any(c.type == "float" for c in cols):
                rels[name] |= {
                    tuple(coerce(v, c.type) for v, c in zip(r, cols, strict=True)) for r in rows
                }
            else:
                rels[name] |= {tuple(r) for r in rows}
        for name in prog.edb:
            check_functional(prog.schemas[name], rels[name])
        db = Database(rels)
        for stratum in prog.strata:
            if all(p in inputs for p in stratum.preds):
                continue
            self.stratum(stratum, db)
            for name in stratum.preds:
                check_functional(prog.schemas[name], rels[name])
        wanted = prog.idb if preds is None else tuple(preds)
        return {name: frozenset(rels[name]) for name in wanted}


def _union_into(sets: dict[str, set[Row]], pred: str, rows: set[Row]) -> None:
    """``sets[pred] |= rows``, taking over ``rows`` (a fresh set) when ``sets[pred]`` is empty
    instead of copying it element by element."""
    if sets[pred]:
        sets[pred] |= rows
    else:
        sets[pred] = rows


def evaluate(
    prog: AnalyzedProgram,
    inputs: Mapping[str, Iterable[Row]],
    preds: Iterable[str] | None = None,
    stats: JoinStats | None = None,
    max_iterations: int | None = None,
) -> dict[str, frozenset[Row]]:
    """IDB relations of ``prog`` over ``inputs`` (EDB relations, and optionally IDB
    relations of earlier strata, which are then not recomputed). ``preds`` selects the
    relations returned (default: every IDB). Raises ``DataError`` (DL3xx) on bad data, and
    DL312 when a recursive stratum passes ``max_iterations`` semi-naive rounds.

    Runs on the columnar core (``deltalog.engine.columnar``); a program it cannot code
    (an integer beyond 64 bits) runs on this module's tuple evaluator, and ``stats.core``
    says which ran and why."""
    stats = stats if stats is not None else JoinStats()
    listed = {name: rows if isinstance(rows, Columns | list | tuple | set | frozenset)
              else list(rows) for name, rows in inputs.items()}
    try:
        result = evaluate_columns(prog, listed, preds, stats, max_iterations)
    except NotColumnar as why:
        stats.core = f"tuples: {why}"
    else:
        stats.core = "columnar"
        return {name: result.rows(name) for name in result.relations}
    ev = Evaluator(prog, max_iterations=max_iterations)
    ev.stats = stats
    rows = {name: value.rows() if isinstance(value, Columns) else value
            for name, value in listed.items()}
    return ev.run(rows, preds)
