"""Full recompute of a deltalog program on Spark: rules compiled to DataFrame operations.

An implementation independent of the engine (binary hash joins, anti-joins, group-by and a
semi-naive loop instead of leapfrog triejoin), used as the oracle for incremental results, for
rebuilds, and for data that outgrows one machine. Program text is data: no SQL is built from it.
The order of each body is ``plan``'s, its expressions are ``columns``'.
"""

import threading
from collections.abc import Callable, Iterable, Mapping

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.errors import FUNCTIONAL_CONFLICT, DataError, NotSupportedError
from deltalog.engine.syntax.ast import Atom, Compare, Const, Negation, Rule, Value, Var
from deltalog.engine.values import format_fact
from deltalog.pipelines.spark.columns import (
    DOUBLE,
    LONG,
    as_type,
    compare,
    equal,
    exact_total,
    expr_column,
    lit_column,
)
from deltalog.pipelines.spark.plan import Plan, plan_rule, unsupported
from deltalog.pipelines.spark.session import conform
from deltalog.schemas.relation import spark_type

# Internal relations have positional columns c0..c{n-1}; rule bodies name variables v0..vN;
# a few helper columns use other prefixes. Program names never reach Spark (Spark resolves
# names case-insensitively, and program text is data).
_GROUP = "g_"
_RESULT = "a_"
_UNIT = "u_"
_NEG_KEY = "nk_"
_NEW = "new_"
_OBSERVATION_TIMEOUT_S = 10.0


def _col(i: int) -> str:
    return f"c{i}"


def _materialize(df: DataFrame, **metrics: Column) -> tuple[DataFrame, dict[str, int]]:
    """``df`` computed once and checkpointed (lineage cut), with ``metrics`` (aggregates
    over its rows) observed during that same job. Should the observation not arrive, the
    metrics are computed from the checkpoint instead (one more, small job)."""
    if not metrics:
        return df.localCheckpoint(eager=True), {}
    obs = Observation()
    out = df.observe(obs, *[c.alias(k) for k, c in metrics.items()]).localCheckpoint(eager=True)
    got: dict[str, object] = {}
    waiter = threading.Thread(target=lambda: got.update(obs.get), daemon=True)
    waiter.start()
    waiter.join(_OBSERVATION_TIMEOUT_S)
    if not got:
        row = out.agg(*[c.alias(k) for k, c in metrics.items()]).collect()[0]
        got = row.asDict()
    return out, {k: int(got.get(k) or 0) for k in metrics}  # type: ignore[call-overload]


class _Compiler:
    def __init__(self, spark: SparkSession, prog: AnalyzedProgram):
        self.spark = spark
        self.prog = prog
        self.rels: dict[str, DataFrame] = {}
        self.plans: dict[tuple[int, int | None], tuple[Rule, Plan]] = {}

    # -- relations -------------------------------------------------------------------------

    def internal_schema(self, name: str) -> T.StructType:
        cols = self.prog.schemas[name].columns
        return T.StructType(
            [T.StructField(_col(i), spark_type(c.type), True) for i, c in enumerate(cols)]
        )

    def from_rows(self, name: str, rows: Iterable[tuple[Value, ...]]) -> DataFrame:
        return self.spark.createDataFrame(list(rows), self.internal_schema(name))

    def plan(self, rule: Rule, prefer: int | None = None) -> Plan:
        key = (id(rule), prefer)
        if key not in self.plans:
            self.plans[key] = (rule, plan_rule(rule, self.prog.schemas, prefer))
        return self.plans[key][1]

    # -- one rule ----------------------------------------------------------------------------

    def atom_df(
        self,
        rel: DataFrame,
        atom: Atom,
        keep: Mapping[str, str],
        cast: Mapping[str, str],
    ) -> DataFrame:
        """``rel`` filtered by the atom's constants and repeated variables, projected onto
        the variables in ``keep`` (variable -> output column name); a variable in ``cast``
        (variable -> its type) is converted to it (``columns.as_type``: no row where the
        column's value has none)."""
        first: dict[str, int] = {}
        conds: list[Column] = []
        types = [c.type for c in self.prog.schemas[atom.pred].columns]
        for i, arg in enumerate(atom.args):
            if isinstance(arg, Const):
                value, t = lit_column(arg.value)
                conds.append(equal(F.col(_col(i)), types[i], value, t))
            elif arg.name in first:
                j = first[arg.name]
                conds.append(equal(F.col(_col(i)), types[i], F.col(_col(j)), types[j]))
            else:
                first[arg.name] = i
        df = rel
        for cond in conds:
            df = df.filter(cond)
        cols = []
        for var, out in keep.items():
            c = F.col(_col(first[var]))
            if var in cast:
                c = as_type(c, types[first[var]], cast[var])
                df = df.filter(c.isNotNull())
            cols.append(c.alias(out))
        return df.select(*cols)

    def body(
        self, rule: Rule, plan: Plan, lookup: Callable[[int, str], DataFrame]
    ) -> tuple[DataFrame, dict[str, str]]:
        """All satisfying assignments of the body, one column per bound variable."""
        names = {v: f"v{i}" for i, v in enumerate(sorted(plan.bound))}
        types = plan.types
        bound: set[str] = set()
        cur: DataFrame | None = None
        tmp = 0
        for step in plan.steps:
            item = rule.body[step.index]
            if step.kind == "atom":
                assert isinstance(item, Atom)
                rel = lookup(step.index, item.pred)
                col_types: dict[str, str] = {}
                for a, c in zip(item.args, self.prog.schemas[item.pred].columns, strict=True):
                    if isinstance(a, Var):
                        col_types.setdefault(a.name, c.type)
                shared = sorted(item.vars & bound)
                new = sorted(item.vars - bound)
                keep = {v: names[v] for v in new}
                join_names = {}
                for v in shared:
                    join_names[v] = f"j{tmp}_"
                    tmp += 1
                keep.update(join_names)
                # A new variable has the analysis' type (an int column read into a float
                # variable is converted); a join compares across types like the engine.
                cast = {v: types[v] for v in new if col_types[v] != types[v]}
                right = self.atom_df(rel, item, keep, cast)
                cond = [
                    equal(F.col(names[v]), types[v], F.col(join_names[v]), col_types[v])
                    for v in shared
                ]
                if cur is None:
                    cur = right
                elif not new:  # nothing to bind: a filter (no row multiplication)
                    cur = cur.join(right, on=cond or None, how="left_semi")
                elif not shared:
                    cur = cur.crossJoin(right)
                else:
                    cur = cur.join(right, on=cond, how="inner").drop(*join_names.values())
                bound |= item.vars
                continue
            if cur is None:
                cur = self.spark.range(1).select(F.lit(1).alias(_UNIT))
            if step.kind == "filter":
                assert isinstance(item, Compare)
                left, lt = expr_column(item.left, names, types)
                right_c, rt = expr_column(item.right, names, types)
                cur = cur.filter(compare(item.op, left, lt, right_c, rt))
            elif step.kind == "assign":
                assert step.target is not None and step.source is not None
                value, vt = expr_column(step.source, names, types)
                value = as_type(value, vt, types[step.target])
                out = names[step.target]
                cur = cur.withColumn(out, value).filter(F.col(out).isNotNull())
                bound.add(step.target)
            elif step.kind == "neg":
                assert isinstance(item, Negation)
                atom = item.atom
                keys = sorted(atom.vars & bound)
                neg_names = {v: f"n{k}_" for k, v in enumerate(keys)}
                right = self.atom_df(lookup(step.index, atom.pred), atom, neg_names, {})
                neg_types: dict[str, str] = {}
                for a, c in zip(atom.args, self.prog.schemas[atom.pred].columns, strict=True):
                    if isinstance(a, Var):
                        neg_types.setdefault(a.name, c.type)
                if keys:
                    cond = [
                        equal(F.col(names[v]), types[v], F.col(neg_names[v]), neg_types[v])
                        for v in keys
                    ]
                    cur = cur.join(right, on=cond, how="left_anti")
                else:
                    right = right.select(F.lit(1).alias(_NEG_KEY)).limit(1)
                    cur = cur.join(right, how="left_anti")
            else:  # pragma: no cover - the planner makes only the kinds above
                raise unsupported(f"plan step {step.kind}", rule)
        if cur is None:
            cur = self.spark.range(1).select(F.lit(1).alias(_UNIT))
        return cur, names

    def rule_df(
        self, rule: Rule, lookup: Callable[[int, str], DataFrame], prefer: int | None = None
    ) -> DataFrame:
        """The head rows the rule derives, as internal columns c0..cn (not yet distinct)."""
        try:
            return self._rule_df(rule, lookup, prefer)
        except NotSupportedError as err:
            if err.where is not None:
                raise
            raise unsupported(err.message.removeprefix("Spark backend: "), rule) from None

    def _rule_df(
        self, rule: Rule, lookup: Callable[[int, str], DataFrame], prefer: int | None = None
    ) -> DataFrame:
        plan = self.plan(rule, prefer)
        df, names = self.body(rule, plan, lookup)
        schema = self.prog.schemas[rule.head.pred]
        spark_types = [spark_type(c.type) for c in schema.columns]

        def term(arg: Var | Const, i: int) -> Column:
            c = F.col(names[arg.name]) if isinstance(arg, Var) else lit_column(arg.value)[0]
            return c.cast(spark_types[i]).alias(_col(i))

        agg = rule.aggregate
        if agg is None:
            return df.select(*[term(a, i) for i, a in enumerate(rule.head.args)])
        # Aggregates range over the distinct assignments of the bound body variables.
        ident = [names[v] for v in sorted(plan.bound)]
        df = df.select(*[F.col(n) for n in ident]).distinct()
        keys = rule.head.args[:-1]
        group = sorted({names[k.name] for k in keys if isinstance(k, Var)})
        if agg.func == "count":
            result = F.count(F.lit(1))
        else:
            if agg.arg is None:
                raise unsupported(f"aggregate {agg.func}() without an argument", rule)
            arg = F.col(names[agg.arg.name])
            if agg.func == "sum":
                # Float sums are exact and correctly rounded, as in the engine (whatever
                # the order of the rows); integer sums are exact anyway.
                dtype = df.schema[names[agg.arg.name]].dataType
                floating = isinstance(dtype, T.DoubleType | T.FloatType)
                result = exact_total(arg.cast(DOUBLE)) if floating else F.sum(arg)
            elif agg.func == "min":
                result = F.min(arg)
            elif agg.func == "max":
                result = F.max(arg)
            elif agg.func == "total":
                result = exact_total(arg.cast(DOUBLE))
            else:
                raise unsupported(f"aggregate {agg.func}()", rule)
        # Grouping by a constant when there are no key variables: an empty body gives no row.
        by = [F.col(g) for g in group] if group else [F.lit(0).alias(_GROUP)]
        out = df.groupBy(*by).agg(result.alias(_RESULT))
        cols = [term(k, i) for i, k in enumerate(keys)]
        cols.append(F.col(_RESULT).cast(spark_types[-1]).alias(_col(len(keys))))
        return out.select(*cols)

    # -- strata ------------------------------------------------------------------------------

    def union(self, name: str, parts: list[DataFrame]) -> DataFrame:
        if not parts:
            return self.from_rows(name, [])
        out = parts[0]
        for p in parts[1:]:
            out = out.union(p)
        return out

    def check_functional(self, name: str, df: DataFrame) -> None:
        schema = self.prog.schemas[name]
        if not schema.functional:
            return
        k = schema.key_arity
        keys = [F.col(_col(i)) for i in range(k)]
        value = F.col(_col(k))
        by = keys if keys else [F.lit(0).alias(_GROUP)]
        bad = (
            df.groupBy(*by)
            .agg(F.min(value).alias("lo_"), F.max(value).alias("hi_"))
            .filter(F.col("lo_") != F.col("hi_"))
        )
        if keys:
            bad = bad.orderBy(*keys)
        found = bad.limit(1).collect()
        if not found:
            return
        row = tuple(found[0])
        key = row[:k]
        a, b = (*key, row[-2]), (*key, row[-1])
        raise DataError(
            f"functional predicate '{name}' has two values for one key: "
            f"{format_fact(name, a, True)} and {format_fact(name, b, True)}",
            name,
            FUNCTIONAL_CONFLICT,
        )

    def evaluate_stratum(
        self, stratum: Stratum, seeds: Mapping[str, DataFrame], keep: set[str]
    ) -> None:
        """Evaluate one stratum into ``self.rels``. A non-recursive result stays a lazy plan
        unless it is in ``keep`` (read several times) or must be checked; recursive strata
        are always computed (and checkpointed)."""
        if not stratum.recursive:
            (name,) = stratum.preds
            parts = [self.rule_df(r, lambda _i, p: self.rels[p]) for r in stratum.rules]
            if name in seeds:
                parts.append(seeds[name])
            df = self.union(name, parts).distinct()
            # One aggregate rule gives one row per key: nothing to check.
            check = self.prog.schemas[name].functional and not (
                len(stratum.rules) == 1
                and stratum.rules[0].aggregate is not None
                and name not in seeds
            )
            if check or name in keep:
                df = df.localCheckpoint(eager=True)
            self.rels[name] = df
            if check:
                self.check_functional(name, df)
            return
        self.semi_naive(stratum, set(stratum.preds), seeds)
        for name in stratum.preds:
            self.check_functional(name, self.rels[name])

    def semi_naive(self, stratum: Stratum, preds: set[str], seeds: Mapping[str, DataFrame]) -> None:
        """Semi-naive iteration to the fixpoint. Each round is one Spark job per predicate:
        the new state (old rows flagged old, new rows flagged new) is checkpointed, which
        cuts the lineage, and the number of new rows is observed during that same job."""
        full: dict[str, DataFrame] = {}
        delta: dict[str, DataFrame] = {}
        size: dict[str, int | None] = {}  # None: seeds not counted yet (maybe empty)
        checkpointed: set[str] = set()
        for name in stratum.preds:
            seed = seeds.get(name)
            if seed is None:
                full[name], size[name] = self.from_rows(name, []), 0
            else:
                full[name], size[name] = seed.distinct(), None

        def rec_positions(rule: Rule) -> list[int]:
            return [
                i for i, it in enumerate(rule.body) if isinstance(it, Atom) and it.pred in preds
            ]

        def may_fire(rule: Rule) -> bool:
            return all(size[rule.body[i].pred] != 0 for i in rec_positions(rule))  # type: ignore[union-attr]

        def lookup_full(_i: int, pred: str) -> DataFrame:
            return full[pred] if pred in preds else self.rels[pred]

        # Round 0: every rule over the seeds; afterwards, rules with one recursive atom
        # reading the last delta and the others reading the whole relation so far.
        cands: dict[str, list[DataFrame]] = {name: [] for name in stratum.preds}
        for rule in stratum.rules:
            if may_fire(rule):
                cands[rule.head.pred].append(self.rule_df(rule, lookup_full))
        while True:
            dsize: dict[str, int] = {}
            for name in stratum.preds:
                if not cands[name]:
                    dsize[name] = 0
                    continue
                cand = self.union(name, cands[name])
                # (Spark's EXCEPT of frames with no columns keeps a row: rows of both
                # sides counted instead, the relation being a set)
                fresh = (cand.distinct().exceptAll(full[name]) if not cand.columns
                         else cand.subtract(full[name]))
                state, seen = _materialize(
                    full[name]
                    .withColumn(_NEW, F.lit(False))
                    .union(fresh.withColumn(_NEW, F.lit(True))),
                    rows=F.count(F.lit(1)),
                    new=F.sum(F.col(_NEW).cast(LONG)),
                )
                checkpointed.add(name)
                full[name] = state.drop(_NEW)
                delta[name] = state.filter(F.col(_NEW)).drop(_NEW)
                size[name], dsize[name] = seen["rows"], seen["new"]
            if not any(dsize.values()):
                break
            cands = {name: [] for name in stratum.preds}
            for rule in stratum.rules:
                if not may_fire(rule):
                    continue
                for j in rec_positions(rule):
                    if dsize[rule.body[j].pred] == 0:  # type: ignore[union-attr]
                        continue

                    def lookup(
                        i: int, pred: str, j: int = j, delta: dict[str, DataFrame] = delta
                    ) -> DataFrame:
                        return delta[pred] if i == j else lookup_full(i, pred)

                    cands[rule.head.pred].append(self.rule_df(rule, lookup, prefer=j))
        for name in stratum.preds:
            if name not in checkpointed:
                full[name] = full[name].localCheckpoint(eager=True)
            self.rels[name] = full[name]


def _needed(prog: AnalyzedProgram, wanted: Iterable[str]) -> set[str]:
    need: set[str] = set()
    stack = list(wanted)
    while stack:
        name = stack.pop()
        if name in need:
            continue
        need.add(name)
        stack.extend(prog.dependencies.get(name, ()))
    return need


def _kept(prog: AnalyzedProgram, strata: Iterable[Stratum], wanted: Iterable[str]) -> set[str]:
    """Relations worth computing once and keeping: read by a recursive stratum (every
    iteration reads them) or read more than once (by rules, or by a rule and the caller)."""
    uses: dict[str, int] = dict.fromkeys(wanted, 1)
    keep: set[str] = set()
    for stratum in strata:
        for rule in stratum.rules:
            for item in rule.body:
                atom = item.atom if isinstance(item, Negation) else item
                if isinstance(atom, Atom) and atom.pred not in stratum.preds:
                    uses[atom.pred] = uses.get(atom.pred, 0) + 1
                    if stratum.recursive:
                        keep.add(atom.pred)
    return keep | {name for name, n in uses.items() if n > 1}


def recompute(
    spark: SparkSession,
    prog: AnalyzedProgram,
    edb: Mapping[str, DataFrame],
    preds: Iterable[str] | None = None,
) -> dict[str, DataFrame]:
    """Every requested IDB relation (default: all) of ``prog`` over the EDB DataFrames.

    Inputs are matched to relations by column position and widened to the relation's types;
    missing ones are empty; program facts are included. ``edb`` may also hold IDB relations:
    a stratum whose predicates are all given is not evaluated again (given rows of a stratum
    that is evaluated are extra facts). Each result has the schema's column names and Spark
    types and distinct rows. Raises ``DataError`` DL302 when a functional predicate has two
    values for one key, ``NotSupportedError`` DL901 for anything this backend cannot compile.
    """
    wanted = tuple(prog.idb if preds is None else preds)
    for name in wanted:
        if name not in prog.schemas:
            raise KeyError(f"unknown relation '{name}'")
    need = _needed(prog, wanted)
    comp = _Compiler(spark, prog)
    given: dict[str, DataFrame] = {}
    for name, df in edb.items():
        if name in prog.schemas and name in need:
            schema = prog.schemas[name]
            given[name] = conform(df, schema, [_col(i) for i in range(schema.arity)])
    seeds: dict[str, DataFrame] = {}
    for name in need:
        parts = []
        if name in given:
            parts.append(given[name])
        if prog.facts.get(name):
            parts.append(comp.from_rows(name, prog.facts[name]))
        if parts:
            seeds[name] = comp.union(name, parts)
    for name in prog.edb:
        if name in need:
            comp.rels[name] = seeds.get(name, comp.from_rows(name, []))
            if prog.schemas[name].functional:
                comp.check_functional(name, comp.rels[name])
    strata = [
        s
        for s in prog.strata
        if need.intersection(s.preds) and not all(p in given for p in s.preds)
    ]
    keep = _kept(prog, strata, wanted)
    chosen = {id(s) for s in strata}
    for stratum in prog.strata:
        if id(stratum) not in chosen and need.intersection(stratum.preds):
            for p in stratum.preds:
                comp.rels[p] = given[p].distinct()
    for stratum in strata:
        comp.evaluate_stratum(stratum, seeds, keep)
    out: dict[str, DataFrame] = {}
    for name in wanted:
        schema = prog.schemas[name]
        df = comp.rels[name]
        if name in prog.edb:
            df = df.distinct()
        out[name] = df.toDF(*[c.name for c in schema.columns])
    return out
