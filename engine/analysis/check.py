"""Analysis of a parsed program, one pass after another: predicates and arities, types,
safety (range restriction), aggregates, stratification.

The result, ``AnalyzedProgram``, is what every evaluator (LFTJ, naive, Spark) starts from:
schemas for every relation, EDB/IDB split, strata in evaluation order, program facts.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.errors import (
    ARITY_MISMATCH,
    BAD_AGGREGATE,
    DUPLICATE_DECL,
    FUNCTIONAL_MISMATCH,
    NOT_STRATIFIABLE,
    TYPE_MISMATCH,
    UNSAFE_VARIABLE,
    AnalysisError,
    Loc,
)
from engine.syntax.ast import (
    Atom,
    BinOp,
    Column,
    Compare,
    Const,
    Decl,
    Expr,
    Negation,
    Program,
    Rule,
    Value,
    Var,
)


@dataclass(frozen=True)
class RelationSchema:
    """Name, typed columns and whether the last column is a functional value."""

    name: str
    columns: tuple[Column, ...]
    functional: bool = False
    declared: bool = True

    @property
    def arity(self) -> int:
        return len(self.columns)

    @property
    def key_arity(self) -> int:
        return self.arity - 1 if self.functional else self.arity


@dataclass(frozen=True)
class Stratum:
    """Predicates defined together (one strongly connected component) and their rules."""

    preds: tuple[str, ...]
    rules: tuple[Rule, ...]
    recursive: bool


@dataclass(frozen=True)
class AnalyzedProgram:
    program: Program
    schemas: dict[str, RelationSchema]
    edb: tuple[str, ...]
    idb: tuple[str, ...]
    strata: tuple[Stratum, ...]
    dependencies: dict[str, frozenset[str]]
    facts: dict[str, frozenset[tuple[Value, ...]]] = field(default_factory=dict)

    def relation_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.schemas))


def _is_fresh(name: str) -> bool:
    return name.startswith("_")


def _where(loc: Loc | None, fallback: str) -> Loc | str:
    return loc if loc is not None else fallback


# ---------------------------------------------------------------------------------------
# Pass 1: predicates, arities, functional-ness.


def _collect_uses(program: Program) -> list[tuple[Atom, str]]:
    uses: list[tuple[Atom, str]] = [(f, "fact") for f in program.facts]
    for rule in program.rules:
        uses.append((rule.head, "head"))
        for item in rule.body:
            if isinstance(item, Atom):
                uses.append((item, "body"))
            elif isinstance(item, Negation):
                uses.append((item.atom, "body"))
    return uses


def _check_predicates(program: Program) -> dict[str, Decl]:
    decls: dict[str, Decl] = {}
    for d in program.decls:
        if d.name in decls:
            first = decls[d.name].loc
            raise AnalysisError(
                f"'{d.name}' is declared twice (first at {first})",
                _where(d.loc, program.file),
                DUPLICATE_DECL,
            )
        names = [c.name for c in d.columns]
        if len(set(names)) != len(names):
            raise AnalysisError(
                f"'{d.name}' declares a column name twice", _where(d.loc, program.file),
                DUPLICATE_DECL,
            )
        decls[d.name] = d
    seen: dict[str, Atom] = {}
    for atom, _ in _collect_uses(program):
        ref: Decl | Atom | None = decls.get(atom.pred) or seen.get(atom.pred)
        if ref is None:
            seen[atom.pred] = atom
            continue
        arity = ref.arity if isinstance(ref, Decl) else len(ref.args)
        if len(atom.args) != arity:
            raise AnalysisError(
                f"'{atom.pred}' has arity {arity} but is used here with {len(atom.args)} "
                "arguments",
                _where(atom.loc, program.file),
                ARITY_MISMATCH,
            )
        if atom.functional != ref.functional:
            form = "functional (F[keys] = value)" if ref.functional else "a relation (R(args))"
            raise AnalysisError(
                f"'{atom.pred}' is {form} but is used here in the other form",
                _where(atom.loc, program.file),
                FUNCTIONAL_MISMATCH,
            )
    return decls


# ---------------------------------------------------------------------------------------
# Pass 2: safety (range restriction) and aggregates.


def bound_vars(rule: Rule) -> set[str]:
    """Variables bound by positive atoms, then by assignments ``v = expr`` to a fixpoint."""
    bound: set[str] = set()
    for item in rule.body:
        if isinstance(item, Atom):
            bound |= item.vars
    changed = True
    while changed:
        changed = False
        for item in rule.body:
            if isinstance(item, Compare) and item.op == "=":
                for target, source in ((item.left, item.right), (item.right, item.left)):
                    if (
                        isinstance(target, Var)
                        and target.name not in bound
                        and _expr_vars(source) <= bound
                    ):
                        bound.add(target.name)
                        changed = True
    return bound


def _expr_vars(expr: Expr) -> set[str]:
    if isinstance(expr, Var):
        return {expr.name}
    if isinstance(expr, BinOp):
        return _expr_vars(expr.left) | _expr_vars(expr.right)
    return set()


def _unsafe(name: str, where: str, rule: Rule, file: str) -> AnalysisError:
    shown = "'_'" if _is_fresh(name) else f"'{name}'"
    return AnalysisError(
        f"variable {shown} in {where} is not bound by a positive atom of the rule body",
        _where(rule.loc, file),
        UNSAFE_VARIABLE,
    )


def _check_safety(rule: Rule, file: str) -> None:
    bound = bound_vars(rule)
    for item in rule.body:
        if isinstance(item, Negation):
            for v in sorted(item.atom.vars):
                if v not in bound and not _is_fresh(v):
                    raise _unsafe(v, f"negated atom {item.atom}", rule, file)
            # A fresh (wildcard) variable may occur only once, inside this negation.
        elif isinstance(item, Compare):
            for v in sorted(item.vars):
                if v not in bound:
                    raise _unsafe(v, f"comparison {item}", rule, file)
    head_vars = rule.head.vars
    if rule.aggregate is not None:
        agg = rule.aggregate
        if not rule.head.functional or rule.head.args[-1] != agg.result:
            raise AnalysisError(
                f"an aggregate rule's head must be F[keys] = {agg.result}",
                _where(rule.loc, file),
                BAD_AGGREGATE,
            )
        if agg.result.name in bound:
            raise AnalysisError(
                f"aggregate result '{agg.result}' must not occur in the rule body",
                _where(agg.loc or rule.loc, file),
                BAD_AGGREGATE,
            )
        if (agg.func == "count") != (agg.arg is None):
            need = "takes no argument" if agg.func == "count" else "needs one argument"
            raise AnalysisError(
                f"aggregate {agg.func}() {need}", _where(agg.loc or rule.loc, file),
                BAD_AGGREGATE,
            )
        if agg.arg is not None and agg.arg.name not in bound:
            raise _unsafe(agg.arg.name, "the aggregate", rule, file)
        head_vars = frozenset(v for v in head_vars if v != agg.result.name)
    for v in sorted(head_vars):
        if v not in bound:
            raise _unsafe(v, f"the head {rule.head}", rule, file)


# ---------------------------------------------------------------------------------------
# Pass 3: types. Column types come from declarations, constants, and flow through rules.

_NUMERIC = ("int", "float")


class _Types:
    def __init__(self, decls: dict[str, Decl], file: str):
        self.file = file
        self.cols: dict[tuple[str, int], str] = {}
        self.declared: set[tuple[str, int]] = set()
        for d in decls.values():
            for i, c in enumerate(d.columns):
                self.cols[(d.name, i)] = c.type
                self.declared.add((d.name, i))

    def join(self, a: str | None, b: str | None, where: Loc | str, what: str) -> str | None:
        if a is None or a == b:
            return b
        if b is None:
            return a
        if a in _NUMERIC and b in _NUMERIC:
            return "float"
        raise AnalysisError(f"type mismatch in {what}: {a} vs {b}", where, TYPE_MISMATCH)

    def col(self, pred: str, i: int) -> str | None:
        return self.cols.get((pred, i))

    def flow_into(self, pred: str, i: int, t: str | None, where: Loc | str, what: str) -> bool:
        if t is None:
            return False
        old = self.cols.get((pred, i))
        if (pred, i) in self.declared:
            assert old is not None
            if old == t or (old == "float" and t == "int"):
                return False
            raise AnalysisError(
                f"type mismatch in {what}: column {i + 1} of '{pred}' is {old}, value is {t}",
                where,
                TYPE_MISMATCH,
            )
        new = self.join(old, t, where, what)
        if new != old:
            self.cols[(pred, i)] = new  # type: ignore[assignment]
            return True
        return False


def _const_type(v: Value) -> str:
    if isinstance(v, str):
        return "string"
    return "float" if isinstance(v, float) else "int"


def _expr_type(expr: Expr, env: dict[str, str], types: _Types, where: Loc | str) -> str | None:
    if isinstance(expr, Const):
        return _const_type(expr.value)
    if isinstance(expr, Var):
        return env.get(expr.name)
    lt = _expr_type(expr.left, env, types, where)
    rt = _expr_type(expr.right, env, types, where)
    for t in (lt, rt):
        if t == "string":
            raise AnalysisError(
                f"arithmetic '{expr.op}' on a string in {expr}", where, TYPE_MISMATCH
            )
    if lt is None or rt is None:
        return None
    return "float" if "float" in (lt, rt) else "int"


def _rule_env(rule: Rule, types: _Types, file: str) -> dict[str, str]:
    env: dict[str, str] = {}
    where = _where(rule.loc, file)
    atoms = [i for i in rule.body if isinstance(i, Atom)]
    atoms += [i.atom for i in rule.body if isinstance(i, Negation)]
    for atom in atoms:
        for i, arg in enumerate(atom.args):
            t = types.col(atom.pred, i)
            if isinstance(arg, Var):
                j = types.join(env.get(arg.name), t, _where(atom.loc, file), f"'{arg.name}'")
                if j is not None:
                    env[arg.name] = j
            elif t is not None:
                ct = _const_type(arg.value)
                if not (ct == t or (t == "float" and ct == "int")):
                    raise AnalysisError(
                        f"type mismatch in {atom}: column {i + 1} of '{atom.pred}' is {t}, "
                        f"constant is {ct}",
                        _where(atom.loc, file),
                        TYPE_MISMATCH,
                    )
    changed = True
    while changed:
        changed = False
        for item in rule.body:
            if not isinstance(item, Compare):
                continue
            loc = _where(item.loc, file)
            lt = _expr_type(item.left, env, types, loc)
            rt = _expr_type(item.right, env, types, loc)
            if lt is not None and rt is not None and (lt == "string") != (rt == "string"):
                raise AnalysisError(
                    f"type mismatch in comparison {item}: {lt} vs {rt}", loc, TYPE_MISMATCH
                )
            if item.op == "=":
                for target, t in ((item.left, rt), (item.right, lt)):
                    if isinstance(target, Var) and t is not None and target.name not in env:
                        env[target.name] = t
                        changed = True
    # A variable of unknown type used in arithmetic is a number.
    for item in rule.body:
        if isinstance(item, Compare):
            for side in (item.left, item.right):
                if isinstance(side, BinOp):
                    for v in _expr_vars(side):
                        env.setdefault(v, "int")
    if rule.aggregate is not None:
        agg = rule.aggregate
        arg_t = env.get(agg.arg.name) if agg.arg is not None else None
        if agg.func in ("sum", "total") and arg_t == "string":
            raise AnalysisError(
                f"aggregate {agg.func}() needs a number, '{agg.arg}' is a string", where,
                TYPE_MISMATCH,
            )
        result_t = {"count": "int", "total": "float"}.get(agg.func, arg_t)
        if result_t is not None:
            env[agg.result.name] = result_t
    return env


def _infer_types(program: Program, decls: dict[str, Decl]) -> _Types:
    types = _Types(decls, program.file)
    for fact in program.facts:
        for i, arg in enumerate(fact.args):
            assert isinstance(arg, Const)
            types.flow_into(
                fact.pred, i, _const_type(arg.value), _where(fact.loc, program.file), str(fact)
            )
    for rule in program.rules:
        for item in rule.body:
            atom = item.atom if isinstance(item, Negation) else item
            if isinstance(atom, Atom):
                for i, arg in enumerate(atom.args):
                    if isinstance(arg, Const):
                        types.flow_into(
                            atom.pred, i, _const_type(arg.value),
                            _where(atom.loc, program.file), str(atom),
                        )
    changed = True
    while changed:
        changed = False
        for rule in program.rules:
            env = _rule_env(rule, types, program.file)
            # Types also flow into the undeclared columns the body reads.
            for item in rule.body:
                atom = item.atom if isinstance(item, Negation) else item
                if isinstance(atom, Atom):
                    for i, arg in enumerate(atom.args):
                        if isinstance(arg, Var) and types.col(atom.pred, i) is None:
                            changed |= types.flow_into(
                                atom.pred, i, env.get(arg.name),
                                _where(atom.loc, program.file), str(atom),
                            )
            for i, arg in enumerate(rule.head.args):
                t = env.get(arg.name) if isinstance(arg, Var) else _const_type(arg.value)
                changed |= types.flow_into(
                    rule.head.pred, i, t, _where(rule.loc, program.file), f"the head of {rule}"
                )
    return types


# ---------------------------------------------------------------------------------------
# Pass 4: stratification over the predicate dependency graph (Tarjan's SCCs).


def _sccs(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components, dependencies before dependents."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


def _path(edges: dict[str, set[str]], start: str, goal: str, within: set[str]) -> list[str]:
    """A shortest path start -> goal inside ``within`` (breadth first)."""
    prev: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(edges.get(node, ())):
                if nxt == goal:
                    path = [goal, node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1]
                if nxt in within and nxt not in seen:
                    seen.add(nxt)
                    prev[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return [start, goal]


def _stratify(program: Program, idb: set[str]) -> tuple[list[Stratum], dict[str, frozenset[str]]]:
    # edges: head -> body predicate ("depends on"); negative when through ! or an aggregate.
    deps: dict[str, set[str]] = defaultdict(set)
    negative: dict[tuple[str, str], Rule] = {}
    for rule in program.rules:
        h = rule.head.pred
        for item in rule.body:
            if isinstance(item, Atom):
                deps[h].add(item.pred)
                if rule.aggregate is not None:
                    negative.setdefault((h, item.pred), rule)
            elif isinstance(item, Negation):
                deps[h].add(item.atom.pred)
                negative.setdefault((h, item.atom.pred), rule)
    idb_edges = {h: {b for b in bs if b in idb} for h, bs in deps.items()}
    comps = _sccs(idb, idb_edges)
    by_head: dict[str, list[Rule]] = defaultdict(list)
    for rule in program.rules:
        by_head[rule.head.pred].append(rule)
    strata: list[Stratum] = []
    for comp in comps:
        members = set(comp)
        for (h, b), rule in negative.items():
            if h in members and b in members:
                cycle = [h, h] if h == b else [h, *_path(idb_edges, b, h, members)]
                kind = "an aggregate" if rule.aggregate is not None else "negation"
                raise AnalysisError(
                    "program is not stratifiable: "
                    f"'{h}' depends on '{b}' through {kind} inside the cycle "
                    + " -> ".join(cycle),
                    _where(rule.loc, program.file),
                    NOT_STRATIFIABLE,
                )
        recursive = len(comp) > 1 or comp[0] in idb_edges.get(comp[0], set())
        rules = tuple(r for p in comp for r in by_head[p])
        strata.append(Stratum(tuple(comp), rules, recursive))
    return strata, {h: frozenset(bs) for h, bs in deps.items()}


# ---------------------------------------------------------------------------------------


def _coerce(value: Value, typ: str) -> Value:
    if typ == "float" and isinstance(value, int):
        return float(value)
    return value


def analyze(program: Program) -> AnalyzedProgram:
    """Run every pass; raise ``AnalysisError`` (DL2xx) with the location of the first error."""
    decls = _check_predicates(program)
    for rule in program.rules:
        _check_safety(rule, program.file)
    types = _infer_types(program, decls)
    idb = {r.head.pred for r in program.rules}
    preds: dict[str, Atom] = {}
    for atom, _ in _collect_uses(program):
        preds.setdefault(atom.pred, atom)
    schemas: dict[str, RelationSchema] = {}
    for name in sorted(set(preds) | set(decls)):
        if name in decls:
            d = decls[name]
            schemas[name] = RelationSchema(name, d.columns, d.functional, True)
            continue
        atom = preds[name]
        cols = tuple(
            Column(f"c{i}", types.col(name, i) or "string") for i in range(len(atom.args))
        )
        schemas[name] = RelationSchema(name, cols, atom.functional, False)
    strata, deps = _stratify(program, idb)
    facts: dict[str, set[tuple[Value, ...]]] = defaultdict(set)
    for f in program.facts:
        schema = schemas[f.pred]
        facts[f.pred].add(
            tuple(
                _coerce(a.value, c.type)  # type: ignore[union-attr]
                for a, c in zip(f.args, schema.columns, strict=True)
            )
        )
    edb = tuple(sorted(set(schemas) - idb))
    return AnalyzedProgram(
        program=program,
        schemas=schemas,
        edb=edb,
        idb=tuple(sorted(idb)),
        strata=tuple(strata),
        dependencies=deps,
        facts={k: frozenset(v) for k, v in facts.items()},
    )
