"""One rule on the columnar core: its body as a compiled leapfrog triejoin over sorted
code arrays, then whole-column steps for what the join does not do, then the head.

The join (``kernels.lftj``) binds, in the planner's variable order
(``deltalog.engine.join.plan.choose_order``), every variable an atom holds and every
variable a constant or another variable gives (``x = 3``, ``x = y``, repeated variables,
constants in atoms; ``x = x~int`` between a float and an int variable, ``typecheck.uncast``,
by converting the number bound first, ``semantics.bind_as``, and looking the other up in
its atoms), and checks every comparison of two variables (or a variable and a
constant) of one type on codes as soon as both sides are bound; a ``>``/``>=`` bound
also lets the leapfrog seek straight past the values it excludes. What is left runs on
the join's output, whole columns at a time: arithmetic (``d = e + 1``; an arithmetic
value for a variable an atom also holds is checked, not sought), comparisons across int
and float or over arithmetic, negations (one batched prefix lookup per negated atom), the
head's projection and coercions, and aggregates (distinct assignments grouped by the
head's keys). Variables the head and those steps do not read are existential: the join
stops at their first witness.

Arithmetic follows ``deltalog.engine.semantics``: C/SQL integer division and remainder,
no result for a division by zero or a float that is not finite. An integer result beyond
64 bits has no code: ``NotColumnar``, and the evaluation runs on the tuple evaluator. So
has an int variable assigned an integral float beyond 64 bits (``z = x / 2.0``, converted
as ``semantics.floats_as_ints``); a variable read from an int and a float column is
refused unless the rule was rewritten by ``uncast``.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.analysis.program import AnalyzedProgram, RelationSchema
from deltalog.engine.columnar import kernels
from deltalog.engine.columnar.encoding import Codes, NotColumnar, float_codes
from deltalog.engine.columnar.rows import I64, Relation, sort_order
from deltalog.engine.errors import DataError
from deltalog.engine.exact_sum import group_out_of_range
from deltalog.engine.heads import body_vars
from deltalog.engine.join.plan import PreparedRule, choose_order, compare_assignments
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.semantics import (
    aggregate,
    arith,
    bind_as,
    compare,
    eval_expr,
    exact_as_floats,
    float_arith,
    floats_as_ints,
    ints_as_floats,
)
from deltalog.engine.syntax.ast import BinOp, Const, Expr, Var, expr_vars

Bool = NDArray[np.bool_]
# ``kernels.lftj``'s recording arguments when nothing is recorded.
NO_SLOTS = np.zeros(0, np.int64)
NO_RECORD = np.zeros((0, 1), np.int64)


def _const_type(v: Any) -> str:
    return "string" if isinstance(v, str) else "float" if isinstance(v, float) else "int"


def _simple(e: Expr) -> bool:
    return isinstance(e, Var | Const)


@dataclass
class Cols:
    """The bound variables of a batch of bindings: codes and type per variable."""

    n: int
    codes: dict[str, I64]
    types: dict[str, str]
    rows: I64 | None = None  # the join's output, while no step has changed the batch
    names: tuple[str, ...] = ()  # its columns' variables

    def keep(self, mask: Bool) -> None:
        if mask.all():
            return
        self.codes = {v: c[mask] for v, c in self.codes.items()}
        self.n = int(mask.sum())
        self.rows = None


class CompiledRule:
    """A rule prepared for the columnar core; ``run`` evaluates it over ``Relation``s."""

    def __init__(self, prog: AnalyzedProgram, prep: PreparedRule, codes: Codes,
                 relations: Mapping[str, Relation]):
        """``relations``: every relation by name, as the evaluation holds them (negated
        atoms are looked up there). A variable may be bound from a number of the other
        type (``x = x~int``, ``z = x / 2.0`` for an int z), converted
        (``semantics.bind_as``)."""
        self.prog = prog
        self.prep = prep
        self.rule = prep.rule
        self.codes = codes
        self.relations = relations
        self.schema: RelationSchema = prog.schemas[self.rule.head.pred]
        self.types = self._var_types()
        self.nullary = [a.index for a in prep.atoms if not a.vars]
        self.held = {v for a in prep.atoms for v in a.vars}
        # Assignment candidates, as the tuple planner takes them: assignments, then both
        # directions of every `=` comparison.
        self.candidates: list[tuple[str, Expr, tuple[str, int]]] = [
            (v, e, ("assign", i)) for i, (v, e) in enumerate(prep.assigns)
        ]
        for j, c in enumerate(prep.filters):
            if c.op == "=":
                for target, source in ((c.left, c.right), (c.right, c.left)):
                    if isinstance(target, Var):
                        self.candidates.append((target.name, source, ("cmp", j)))
        agg = self.rule.aggregate
        if (agg is not None and agg.func in ("sum", "total") and agg.arg is not None
                and self.types.get(agg.arg.name) == "string"):
            raise NotColumnar("a sum of strings")

    def _var_types(self) -> dict[str, str]:
        types: dict[str, str] = {}
        # A variable is read from columns of one type (codes are per type): a rule whose
        # variable joins an int and a float column is read through ``typecheck.uncast``.
        for a in self.prep.atoms:
            for v, c in zip(a.vars, self.prog.schemas[a.pred].columns, strict=True):
                if types.setdefault(v, c.type) != c.type:
                    raise NotColumnar(
                        f"variable {v} joins a {types[v]} column with a {c.type} column "
                        f"(rule at {self.rule.loc})"
                    )
        # A variable the analysis types otherwise than a binding may give it (``Rule.casts``):
        # an assignment's value is converted (``assign``, the join's conversion levels);
        # codes of an atom's column would be the other type's.
        for v, typ in self.rule.casts:
            if types.get(v, typ) != typ:
                raise NotColumnar(f"variable {v}, a {typ}, is bound by a {types[v]} column "
                                  f"(rule at {self.rule.loc})")
            types[v] = typ
        changed = True
        sources = (*self.prep.assigns, *compare_assignments(self.prep))
        while changed:
            changed = False
            for v, e in sources:
                if v not in types:
                    t = self._expr_type(e, types)
                    if t is not None:
                        types[v] = t
                        changed = True
        return types

    @staticmethod
    def _expr_type(e: Expr, types: Mapping[str, str]) -> str | None:
        if isinstance(e, Var):
            return types.get(e.name)
        if isinstance(e, Const):
            return _const_type(e.value)
        assert isinstance(e, BinOp)
        left = CompiledRule._expr_type(e.left, types)
        right = CompiledRule._expr_type(e.right, types)
        if left is None or right is None:
            return None
        return "int" if left == right == "int" else "float"

    # -- planning ---------------------------------------------------------------------

    def _copy(self, v: str, source: str, level: int) -> tuple[int, int] | None:
        """(kind, level) of a join level binding ``v`` from the variable ``source`` bound
        at ``level``: its value, or its number converted (``kernels.FLOAT_OF_INT``,
        ``INT_OF_FLOAT``) when the two are an int and a float and an atom holds ``v`` (it
        is looked up there, so an integral float beyond the int64s, whose int has no
        code, matches nothing, as no binding does); None: ``v`` is computed after the
        join (``assign``)."""
        have, want = self.types[source], self.types[v]
        if have == want:
            return kernels.COPY, level
        if v not in self.held or {have, want} != {"int", "float"}:
            return None
        return (kernels.FLOAT_OF_INT if want == "float" else kernels.INT_OF_FLOAT), level

    def _kernel_operand(
        self, e: Expr, typ: str, kvars: Mapping[str, int]
    ) -> tuple[int, int] | None:
        """(kind, value) of a join check's operand of type ``typ``: a level, or a code."""
        if isinstance(e, Var):
            if e.name in kvars and self.types[e.name] == typ:
                return 0, kvars[e.name]
            return None
        if isinstance(e, Const):
            try:
                return 1, self.codes.code(e.value, typ)
            except NotColumnar:
                return None
        return None

    def plan(self, sizes: Mapping[int, int], fresh: AbstractSet[int],
             order: Sequence[str] | None = None, every: bool = False) -> "_Plan":
        """The plan on ``order`` (the planner's choice when not given); ``every``: no
        variable is existential (the join gives every assignment)."""
        prep = self.prep
        if order is None:
            order = choose_order(prep, sizes, fresh)
        pos = {v: i for i, v in enumerate(order)}
        kernel: list[str] = []
        kinds: list[int] = []
        args: list[int] = []
        post_assign: list[tuple[str, Expr]] = []
        used: set[tuple[str, int]] = set()
        kvars: dict[str, int] = {}
        for v in order:
            source = None
            for target, expr, origin in self.candidates:
                if target != v or origin in used:
                    continue
                if all(pos[d] < pos[v] for d in expr_vars(expr)):
                    source = (expr, origin)
                    break
            simple = None
            if source is not None:
                expr, origin = source
                if isinstance(expr, Const):
                    try:
                        simple = (kernels.CONST, self.codes.code(expr.value, self.types[v]))
                    except NotColumnar:
                        simple = None
                elif isinstance(expr, Var) and expr.name in kvars:
                    simple = self._copy(v, expr.name, kvars[expr.name])
            if simple is not None:
                used.add(source[1])  # type: ignore[index]
                kvars[v] = len(kernel)
                kernel.append(v)
                kinds.append(simple[0])
                args.append(simple[1])
            elif v in self.held:
                kvars[v] = len(kernel)
                kernel.append(v)
                kinds.append(kernels.JOIN)
                args.append(0)
            else:
                assert source is not None, f"variable {v} has no source"
                used.add(source[1])
                post_assign.append((v, source[0]))
        # Every unused candidate and every other comparison is a check.
        checks: list[tuple[str, Expr, Expr]] = []
        for target, expr, origin in self.candidates:
            if origin not in used:
                if origin[0] == "assign":
                    checks.append(("=", Var(target), expr))
                    used.add(origin)
                elif origin not in used:
                    c = prep.filters[origin[1]]
                    checks.append(("=", c.left, c.right))
                    used.add(origin)
        for c in prep.filters:  # (an `=` between two expressions is no candidate)
            if c.op != "=" or (not isinstance(c.left, Var) and not isinstance(c.right, Var)):
                checks.append((c.op, c.left, c.right))
        nlev = len(kernel)
        level_checks: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(nlev)]
        post_checks: list[tuple[str, Expr, Expr]] = []
        pre_checks: list[tuple[str, Expr, Expr]] = []
        low: list[tuple[int, int, int]] = [(-1, 0, 0)] * nlev
        for op, left, right in checks:
            names = expr_vars(left) | expr_vars(right)
            if not names:
                pre_checks.append((op, left, right))
                continue
            typ = self._expr_type(left, self.types) if isinstance(left, Var) else (
                self._expr_type(right, self.types))
            lo_ = self._kernel_operand(left, typ, kvars) if typ else None
            ro_ = self._kernel_operand(right, typ, kvars) if typ else None
            if lo_ is None or ro_ is None or not _simple(left) or not _simple(right) or (
                    self._expr_type(left, self.types) != self._expr_type(right, self.types)
                    and not (isinstance(left, Const) or isinstance(right, Const))):
                post_checks.append((op, left, right))
                continue
            level = max(kvars[n] for n in names)
            level_checks[level].append((kernels.OPS[op], lo_[0], lo_[1], ro_[0], ro_[1]))
            # A lower bound for the level's variable: `v > e`, `v >= e`, `e < v`, `e <= v`.
            var = kernel[level]
            if kinds[level] == kernels.JOIN and low[level][0] < 0:
                if isinstance(left, Var) and left.name == var and op in (">", ">=") and (
                        ro_[0] == 1 or ro_[1] < level):
                    low[level] = (ro_[0], ro_[1], 1 if op == ">" else 0)
                elif isinstance(right, Var) and right.name == var and op in ("<", "<=") and (
                        lo_[0] == 1 or lo_[1] < level):
                    low[level] = (lo_[0], lo_[1], 1 if op == "<" else 0)
        # Variables the steps after the join read.
        needed: set[str] = set(prep.head_vars)
        if self.rule.aggregate is not None or every:
            needed |= set(kernel)
        for _, e in post_assign:
            needed |= expr_vars(e)
        for _, left, right in post_checks:
            needed |= expr_vars(left) | expr_vars(right)
        for neg in prep.negations:
            needed |= {v for v in neg.vars if v in pos}
        out = [v for v in kernel if v in needed]
        exist = max((kvars[v] + 1 for v in out), default=0)
        return _Plan(kernel, kinds, args, level_checks, low, out, exist,
                     post_assign, post_checks, pre_checks)

    # -- running ------------------------------------------------------------------

    def run(self, sources: Sequence[Relation], fresh: AbstractSet[int], stats: JoinStats,
            into: Relation) -> None:
        """Add to ``into`` the head rows of the rule with atom i reading ``sources[i]``."""
        into.add(self.heads(sources, fresh, stats))

    def heads(self, sources: Sequence[Relation], fresh: AbstractSet[int], stats: JoinStats,
              every: bool = False) -> I64:
        """The head rows of the rule with atom i reading ``sources[i]``; ``every``: one
        per assignment of the body's variables (its derivations, repeats kept; a rule
        with no aggregate)."""
        prep = self.prep
        if every and self.rule.aggregate is not None:
            raise ValueError("the derivations of an aggregate rule")
        if any(not len(sources[i]) for i in self.nullary):
            return self._empty()
        plan = self.plan({i: len(s) for i, s in enumerate(sources)}, fresh, every=every)
        for op, left, right in plan.pre_checks:
            a, b = eval_expr(left, {}), eval_expr(right, {})
            if a is None or b is None or not compare(op, a, b):
                return self._empty()
        cols = self._join(plan, sources, stats)
        for v, e in plan.post_assign:
            self.assign(cols, v, e)
        for op, left, right in plan.post_checks:
            cols.keep(self.check(cols, op, left, right))
        for neg in prep.negations:
            if cols.n:
                cols.keep(~self.negated(cols, neg))
        if self.rule.aggregate is not None:
            return self._aggregate(cols)
        if every and not self.schema.arity:
            return np.zeros((cols.n, 0), np.int64)
        return self._head(cols)

    def _empty(self) -> I64:
        return np.zeros((0, self.schema.arity), np.int64)

    def kernel_args(
        self, plan: "_Plan", sources: Sequence[Relation]
    ) -> tuple[Any, list[list[tuple[int, int]]], list[int]]:
        """``kernels.lftj``'s arguments for ``plan``; the (kernel atom, depth)
        slots of each level; the rule's atom index of each kernel atom."""
        prep = self.prep
        pos = {v: i for i, v in enumerate(plan.kernel)}
        rels: list[I64] = []
        atom_of: list[int] = []
        slots: list[list[tuple[int, int]]] = [[] for _ in plan.kernel]
        for a in prep.atoms:
            if not a.vars:
                continue
            cols = sorted(range(len(a.vars)), key=lambda c: pos[a.vars[c]])
            index = sources[a.index].index(tuple(cols))
            for depth, c in enumerate(cols):
                slots[pos[a.vars[c]]].append((len(rels), depth))
            rels.append(index)
            atom_of.append(a.index)
        if not rels:
            rels.append(np.zeros((1, 1), np.int64))
        lev_ptr = np.zeros(len(plan.kernel) + 1, np.int64)
        slot_atom: list[int] = []
        slot_depth: list[int] = []
        chk_ptr = np.zeros(len(plan.kernel) + 1, np.int64)
        chk: list[tuple[int, int, int, int, int]] = []
        for level in range(len(plan.kernel)):
            for atom_no, depth in slots[level]:
                slot_atom.append(atom_no)
                slot_depth.append(depth)
            lev_ptr[level + 1] = len(slot_atom)
            chk.extend(plan.checks[level])
            chk_ptr[level + 1] = len(chk)
        ch = np.array(chk, np.int64).reshape(-1, 5)
        lows = np.array(plan.low, np.int64).reshape(-1, 3)
        args = (
            kernels.atom_tuple(rels),
            np.array(plan.kinds, np.int64), np.array(plan.args, np.int64), lev_ptr,
            np.array(slot_atom, np.int64), np.array(slot_depth, np.int64),
            chk_ptr, ch[:, 0].copy(), ch[:, 1].copy(), ch[:, 2].copy(), ch[:, 3].copy(),
            ch[:, 4].copy(), lows[:, 0].copy(), lows[:, 1].copy(), lows[:, 2].copy(),
            np.array([pos[v] for v in plan.out], np.int64), plan.exist,
        )
        return args, slots, atom_of

    def _join(self, plan: "_Plan", sources: Sequence[Relation], stats: JoinStats) -> Cols:
        args, slots, _ = self.kernel_args(plan, sources)
        rels = args[0]
        parts = _split(plan, rels, slots[0] if slots else [])
        if len(parts) == 1:
            counters = np.zeros(kernels.N_COUNTERS, np.int64)
            out, n, _, _ = run_lftj(args, counters, *parts[0], NO_SLOTS, NO_RECORD)
        else:
            # Threads over ranges of the first variable (the kernel releases the GIL).
            counts = [np.zeros(kernels.N_COUNTERS, np.int64) for _ in parts]
            with ThreadPoolExecutor(THREADS) as pool:
                done = list(pool.map(
                    lambda i: run_lftj(args, counts[i], *parts[i], NO_SLOTS, NO_RECORD)[:2],
                    range(len(parts))))
            counters = np.sum(counts, axis=0)
            out = np.concatenate([o[:k] for o, k in done])
            n = out.shape[0]
        stats.opens += int(counters[kernels.C_OPENS])
        stats.seeks += int(counters[kernels.C_SEEKS])
        stats.nexts += int(counters[kernels.C_NEXTS])
        out = out[:n]
        return Cols(
            int(n),
            {v: out[:, j] for j, v in enumerate(plan.out)},
            {v: self.types[v] for v in plan.out},
            out,
            tuple(plan.out),
        )

    # -- whole-column steps ----------------------------------------------------------

    def _numeric(self, cols: Cols, e: Expr) -> tuple[NDArray[Any], Bool, str]:
        """Values of an arithmetic expression over the batch: (values, defined, type)."""
        n = cols.n
        if isinstance(e, Var):
            t = cols.types[e.name]
            return self.codes.decode(cols.codes[e.name], t), np.ones(n, np.bool_), t
        if isinstance(e, Const):
            t = _const_type(e.value)
            if t == "int" and not -(2**63) <= e.value < 2**63:  # type: ignore[operator]
                raise NotColumnar("an integer constant beyond 64 bits")
            return (np.full(n, e.value, np.int64 if t == "int" else np.float64),
                    np.ones(n, np.bool_), t)
        assert isinstance(e, BinOp)
        a, da, ta = self._numeric(cols, e.left)
        b, db, tb = self._numeric(cols, e.right)
        ok = da & db
        if ta == "string" or tb == "string":
            raise NotColumnar(f"arithmetic on strings in {e}")
        if ta == tb == "int":
            return (*_int_op(e.op, a, b, ok), "int")
        return (*float_arith(e.op, a, b, ok), "float")

    def assign(self, cols: Cols, v: str, e: Expr) -> None:
        """Bind ``v`` to ``e`` on every row (a number of the other type than ``v``'s: the
        number of its type equal to it, none where there is none, ``semantics.bind_as``;
        an integral float beyond the int64s has an int with no code: ``NotColumnar``)."""
        typ = self.types.get(v)
        given = self._expr_type(e, cols.types)
        convert = {typ, given} == {"int", "float"}
        if isinstance(e, Var) and not convert:
            cols.codes[v] = cols.codes[e.name]
            cols.types[v] = cols.types[e.name]
            return
        if isinstance(e, Const) and not convert:
            t = _const_type(e.value)
            cols.codes[v] = np.full(cols.n, self.codes.code(e.value, t), np.int64)
            cols.types[v] = t
            return
        values, ok, t = self._numeric(cols, e)
        if convert and typ == "float":
            values, exact = ints_as_floats(values)
            ok = ok & exact
            t = "float"
        elif convert:
            values, exact, beyond = floats_as_ints(np.where(ok, values, 0.0))
            if beyond:
                raise NotColumnar("an integer beyond 64 bits")
            ok = ok & exact
            t = "int"
        cols.codes[v] = float_codes(values) if t == "float" else values.astype(np.int64)
        cols.types[v] = t
        cols.keep(ok)

    def check(self, cols: Cols, op: str, left: Expr, right: Expr) -> Bool:
        lt = self._expr_type(left, cols.types)
        rt = self._expr_type(right, cols.types)
        if lt == "string" or rt == "string":
            return _cmp(op, self._string_codes(cols, left), self._string_codes(cols, right))
        a, da, ta = self._numeric(cols, left)
        b, db, tb = self._numeric(cols, right)
        ok = da & db
        if ta == tb:
            return ok & _cmp(op, a, b)
        if not exact_as_floats(a if ta == "int" else b):
            # Beyond 2^53 an int is not exact as a float: compare as Python does.
            return ok & np.array(
                [compare(op, x, y) for x, y in zip(a.tolist(), b.tolist(), strict=True)],
                np.bool_)
        return ok & _cmp(op, a.astype(np.float64), b.astype(np.float64))

    def _string_codes(self, cols: Cols, e: Expr) -> I64:
        if isinstance(e, Var):
            return cols.codes[e.name]
        assert isinstance(e, Const)
        return np.full(cols.n, self.codes.code(e.value, "string"), np.int64)

    def _as_column(self, cols: Cols, e: Var | Const, typ: str) -> I64:
        """Codes of a variable or constant in a column of type ``typ``."""
        if isinstance(e, Const):
            value = float(e.value) if typ == "float" else e.value  # type: ignore[arg-type]
            return np.full(cols.n, self.codes.code(value, typ), np.int64)
        t = cols.types[e.name]
        codes = cols.codes[e.name]
        if t == typ:
            return codes
        if t == "int" and typ == "float":
            return float_codes(codes.astype(np.float64))
        raise NotColumnar(f"a {t} value in a {typ} column")

    def negated(self, cols: Cols, neg: Any) -> Bool:
        """Which bindings the negated atom holds (on its bound columns)."""
        schema = self.prog.schemas[neg.pred]
        fixed: list[int] = []
        free: list[int] = []
        for i, a in enumerate(neg.args):
            if isinstance(a, Const) or a.name in cols.codes:
                fixed.append(i)
            else:
                free.append(i)
        rel = self.relations[neg.pred]
        if not len(rel):
            return np.zeros(cols.n, np.bool_)
        if not fixed:
            return np.ones(cols.n, np.bool_)
        index = rel.index(tuple(fixed + free))
        probes = [self._probe_column(cols, neg.args[i], schema.columns[i].type)
                  for i in fixed]
        queries = np.stack([c for c, _ in probes], axis=1)
        partial = [k for _, k in probes if k is not None]
        if not partial:
            return kernels.has_prefix(index, np.ascontiguousarray(queries))  # type: ignore[no-any-return]
        ok = np.logical_and.reduce(partial)
        held = np.zeros(cols.n, np.bool_)
        held[ok] = kernels.has_prefix(index, np.ascontiguousarray(queries[ok]))
        return held

    def _probe_column(self, cols: Cols, e: Var | Const, typ: str) -> tuple[I64, Bool | None]:
        """Codes of a negation's argument in its column of type ``typ``, and the rows where
        it has one (None: every row): a number of the other type is looked up as the
        number of ``typ`` equal to it (``semantics.bind_as``); where there is none, no row
        holds it."""
        n = cols.n
        if isinstance(e, Const):
            value = bind_as(e.value, typ)
            if value is None:
                return np.zeros(n, np.int64), np.zeros(n, np.bool_)
            return np.full(n, self.codes.code(value, typ), np.int64), None
        t = cols.types[e.name]
        if t == typ or {t, typ} != {"int", "float"}:
            return self._as_column(cols, e, typ), None
        codes = cols.codes[e.name]
        if typ == "float":
            floats, exact = ints_as_floats(codes)
            return float_codes(floats), exact
        ints, exact, _ = floats_as_ints(self.codes.decode(codes, t))
        return ints, exact  # (an int beyond the int64s is in no int column)


    def _head(self, cols: Cols) -> I64:
        if not self.schema.arity:
            return np.zeros((1 if cols.n else 0, 0), np.int64)
        head = self.rule.head.args
        if cols.rows is not None and cols.names == tuple(
                a.name if isinstance(a, Var) else None for a in head) and all(
                cols.types[v] == c.type for v, c in zip(cols.names, self.schema.columns,
                                                         strict=True)):
            return cols.rows
        return np.stack(
            [self._as_column(cols, a, c.type)  # type: ignore[arg-type]
             for a, c in zip(self.rule.head.args, self.schema.columns, strict=True)],
            axis=1,
        )

    def _aggregate(self, cols: Cols) -> I64:
        agg = self.rule.aggregate
        assert agg is not None
        ident = [v for v in body_vars(self.rule) if v in cols.codes]
        keys = self.rule.head.args[:-1]
        if not cols.n:
            return self._empty()
        # Distinct assignments, then groups by the head's keys, in the key variables' own
        # types (as every evaluator groups them): ints beyond 2^53 that one float key
        # stands for are two groups, two values of that key (the relation's DL302).
        key_types = [cols.types[k.name] if isinstance(k, Var) else c.type
                     for k, c in zip(keys, self.schema.columns, strict=False)]
        key_cols = [self._as_column(cols, k, t)  # type: ignore[arg-type]
                    for k, t in zip(keys, key_types, strict=True)]
        arg_t = cols.types[agg.arg.name] if agg.arg is not None else "int"
        arg = cols.codes[agg.arg.name] if agg.arg is not None else np.zeros(cols.n, np.int64)
        width = len(key_cols)
        table = np.stack([*key_cols, *(cols.codes[v] for v in ident), arg], axis=1)
        distinct = _distinct_on(table, width, len(ident))
        table = table[distinct]
        if width:
            starts = np.flatnonzero(np.r_[True, kernels.distinct_sorted(
                np.ascontiguousarray(table[:, :width]))[1:]])
        else:
            starts = np.zeros(1, np.int64)
        group_keys = table[starts, :width]
        if [c.type for c in self.schema.columns[:width]] != key_types:
            group_keys = np.column_stack([
                self._as_column(Cols(len(starts), {"#": group_keys[:, j]}, {"#": t}),
                                Var("#"), c.type)
                for j, (t, c) in enumerate(zip(key_types, self.schema.columns,
                                               strict=False))])
        values = table[:, -1]
        result_col = self.schema.columns[-1].type
        func = agg.func
        if func == "count":
            counts = np.diff(np.r_[starts, len(table)])
            res = self._as_column(Cols(len(counts), {"#": counts.astype(np.int64)},
                                        {"#": "int"}), Var("#"), result_col)
        elif func in ("min", "max"):
            red = np.minimum if func == "min" else np.maximum
            got = red.reduceat(values, starts)
            res = self._as_column(Cols(len(got), {"#": got}, {"#": arg_t}), Var("#"),
                                  result_col)
        else:
            decoded = self.codes.python(values, arg_t)
            bounds = [*starts.tolist(), len(table)]
            out: list[Any] = []
            key_rows = group_keys.tolist()
            for g in range(len(starts)):
                try:
                    out.append(aggregate(func, decoded[bounds[g]:bounds[g + 1]]))
                except DataError as err:
                    raise group_out_of_range(err, self.rule.head.pred, tuple(
                        self._key_values(key_rows[g]))) from None
            typ = "float" if func == "total" or arg_t == "float" else "int"
            if typ == "float" and result_col == "float":
                res = float_codes(np.array(out, np.float64))
            else:
                res = self.codes.encode(out, result_col)
        return np.ascontiguousarray(np.column_stack([group_keys, res]))

    def _key_values(self, codes: list[int]) -> list[Any]:
        return [self.codes.python(np.array([c], np.int64), col.type)[0]
                for c, col in zip(codes, self.schema.columns, strict=False)]


# Threads a join may use (ranges of its first variable), and the rows its largest first
# atom must have before it is split.
THREADS = min(os.cpu_count() or 1, 8)
SPLIT_MIN = 20_000
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def run_lftj(args: Any, *rest: Any) -> Any:
    """``kernels.lftj`` on a plan's arguments (``CompiledRule.kernel_args``) and the rest:
    counters, the first level's range, the recording's slots and buffer."""
    return kernels.lftj(*args, *rest)


def run_recording(run: Callable[[I64], tuple[Any, ...]], width: int, room: int
                  ) -> tuple[Any, ...]:
    """A recording join, ``run(rec)`` (``kernels.lftj`` or its kin: rows, n, records, their
    number), with a buffer of ``room`` records of ``width`` columns; again with room for
    every record it counted when they did not fit (a join never grows its buffer: see
    ``kernels._note``). ``run`` starts its counters afresh."""
    room = max(room, 1)  # (an empty buffer asks for no recording)
    while True:
        got = run(np.empty((room, width), np.int64))
        if got[3] <= room:
            return got
        room = int(got[3])


def _split(plan: "_Plan", rels: Sequence[I64],
           first: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """[lo, hi] ranges of the first variable's codes for the threads: quantiles of the
    largest atom that binds it, four per thread (the work per value is uneven: threads
    take the next range when done); one range when the join is small or the first level
    is not a join of atoms."""
    whole = [(_I64_MIN, _I64_MAX)]
    if THREADS < 2 or not first or plan.kinds[0] != kernels.JOIN or len(plan.kinds) < 2:
        return whole
    column = max((rels[a][:, 0] for a, _ in first), key=len)
    if len(column) < SPLIT_MIN:
        return whole
    pieces = 4 * THREADS
    cuts = sorted({int(column[len(column) * i // pieces]) for i in range(1, pieces)}
                  - {_I64_MIN})
    bounds = [_I64_MIN, *cuts]
    return [(lo, hi - 1) for lo, hi in zip(bounds, cuts, strict=False)] + [(bounds[-1], _I64_MAX)]


def split_recording(plan: "_Plan", rels: Sequence[I64],
                    first: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """[lo, hi] pieces of a recording join for the threads (``kernels.lftj``): each after
    the first starts at a value that every atom of the first level holds and that its
    lower bound admits (where the whole join's leapfrog agrees), chosen at quantiles of
    the largest such atom's rows, four per thread; one piece when the join is small, the
    first level is not a join of atoms, or every binding but one only witnesses."""
    whole = [(_I64_MIN, _I64_MAX)]
    if (THREADS < 2 or not first or plan.kinds[0] != kernels.JOIN or len(plan.kinds) < 2
            or plan.exist < 1):
        return whole
    columns = [rels[a][:, 0] for a, _ in first]
    largest = max(columns, key=len)
    if len(largest) < SPLIT_MIN:
        return whole
    held = None
    for column in columns:
        keys = column[np.r_[True, column[1:] != column[:-1]]] if len(column) else column
        held = keys if held is None else np.intersect1d(held, keys, assume_unique=True)
    assert held is not None
    kind, value, strict = plan.low[0]
    if kind == 1:  # (a constant: the leapfrog never stands below it)
        held = held[held > value] if strict else held[held >= value]
    elif kind == 0:
        return whole
    at = np.searchsorted(largest, held)  # the rows before each held value
    pieces = 4 * THREADS
    picks = np.unique(np.searchsorted(at, [len(largest) * i // pieces
                                           for i in range(1, pieces)]))
    starts = [int(v) for v in held[picks[(picks > 0) & (picks < len(held))]]]
    if not starts:
        return whole
    bounds = [_I64_MIN, *starts]
    return [(lo, hi - 1) for lo, hi in zip(bounds, starts, strict=False)] + [
        (starts[-1], _I64_MAX)]


def _distinct_on(table: I64, width: int, nident: int) -> NDArray[np.intp]:
    """Rows of ``table`` with distinct (keys, ident) columns, sorted by them."""
    part = np.ascontiguousarray(table[:, : width + nident])
    order = sort_order(part)
    keep = kernels.distinct_sorted(np.ascontiguousarray(part[order]))
    return order[keep]  # type: ignore[no-any-return]


@dataclass
class _Plan:
    kernel: list[str]
    kinds: list[int]
    args: list[int]
    checks: list[list[tuple[int, int, int, int, int]]]
    low: list[tuple[int, int, int]]
    out: list[str]
    exist: int
    post_assign: list[tuple[str, Expr]]
    post_checks: list[tuple[str, Expr, Expr]]
    pre_checks: list[tuple[str, Expr, Expr]]


def _cmp(op: str, a: NDArray[Any], b: NDArray[Any]) -> Bool:
    if op == "=":
        return a == b  # type: ignore[no-any-return]
    if op == "!=":
        return a != b  # type: ignore[no-any-return]
    if op == "<":
        return a < b  # type: ignore[no-any-return]
    if op == "<=":
        return a <= b  # type: ignore[no-any-return]
    if op == ">":
        return a > b  # type: ignore[no-any-return]
    return a >= b  # type: ignore[no-any-return]


_LIMIT = 2**62


def _int_op(op: str, a: I64, b: I64, ok: Bool) -> tuple[I64, Bool]:
    """``a op b`` on int64 with the language's integer semantics; ``NotColumnar`` when an
    operand or a result leaves int64 (the language's integers are unbounded)."""
    with np.errstate(all="ignore"):
        if op in ("+", "-"):
            r = a + b if op == "+" else a - b
            over = ((a ^ r) & ((b if op == "+" else ~b) ^ r)) < 0
            if (over & ok).any():
                raise NotColumnar("an integer result beyond 64 bits")
            return r, ok
        if op == "*":
            r = a * b
            big = (np.abs(a.astype(np.float64)) * np.abs(b.astype(np.float64))) >= _LIMIT
            if (big & ok).any():
                exact = [arith("*", x, y) for x, y in zip(a[big].tolist(), b[big].tolist(),
                                                          strict=True)]
                if any(not -(2**63) <= v < 2**63 for v in exact):  # type: ignore[operator]
                    raise NotColumnar("an integer result beyond 64 bits")
                r[big] = np.array(exact, np.int64)
            return r, ok
        ok = ok & (b != 0)
        if ((a == np.iinfo(np.int64).min) & ok).any():
            raise NotColumnar("an integer result beyond 64 bits")
        safe = np.where(b == 0, 1, b)
        q = np.abs(a) // np.abs(safe)
        q = np.where((a < 0) != (safe < 0), -q, q)
        return (q if op == "/" else a - safe * q), ok
