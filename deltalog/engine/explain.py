"""Why a fact holds, and why one does not: derivation trees over the current relations.

``explain`` finds a derivation tree of a fact of minimal height: a rule instance whose
positive body facts hold, each explained in turn, down to input (EDB) facts and facts of
the program, with the negations and comparisons the instance satisfies alongside. Heights
are found by iterative deepening ("is there a derivation of height at most h?", memoized
per fact and bound), each rule instance by a leapfrog triejoin with the head bound, so the
search only touches the facts the answer rests on. An aggregate's fact rests on every
member of its group. Nothing is kept for this between runs: it is computed when asked.

``why_not`` says, for an absent fact, per rule that could derive it, the first body item
that no instance gets past (the positive atom with no matching fact under the bindings so
far, the negation that holds, the comparison that fails).
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.evaluate import Database
from deltalog.engine.join.leapfrog import leapfrog_triejoin
from deltalog.engine.join.plan import Env, build_plan, prepare
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.semantics import coerce, compare, eval_expr
from deltalog.engine.syntax.ast import Atom, BodyItem, Compare, Const, Negation, Rule, Var
from deltalog.engine.values import Row, Value, format_fact, format_value

Fact = tuple[str, Row]


@dataclass
class Derivation:
    """A fact and how it holds: ``rule`` is None for an input fact (``source`` says which:
    ``"edb"`` or ``"program"``); else the rule instance's positive body facts are
    ``children``, and ``conditions`` the negations and comparisons it satisfied."""

    pred: str
    row: Row
    rule: Rule | None = None
    source: str = ""
    children: list["Derivation"] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)

    @property
    def height(self) -> int:
        return 0 if self.rule is None else 1 + max((c.height for c in self.children), default=0)

    def facts(self) -> Iterator["Derivation"]:
        yield self
        for c in self.children:
            yield from c.facts()


class Explainer:
    """Derivations over ``relations`` (every relation of ``prog``, as sets of rows: the
    current EDB and what the program derives from it) and the facts the program states
    (an input's are in no table, a switch has none)."""

    def __init__(self, prog: AnalyzedProgram, relations: Mapping[str, set[Row]]):
        self.prog = prog
        self.db = Database({name: set(relations.get(name, ())) | prog.facts.get(name, set())
                            for name in prog.schemas})
        self.rules: dict[str, list[Rule]] = {}
        for rule in prog.program.rules:
            self.rules.setdefault(rule.head.pred, []).append(rule)
        self.program_facts = {name: set(rows) for name, rows in prog.facts.items()}
        self._found: dict[Fact, tuple[int, Rule, Env]] = {}
        self._failed: dict[Fact, int] = {}  # no derivation of height <= this bound
        self.stats = JoinStats()

    # -- the public questions ------------------------------------------------------------
    def holds(self, pred: str, row: Row) -> bool:
        return self._row(pred, row) in self.db.relations[pred]

    def explain(self, pred: str, row: Row) -> Derivation | None:
        """A derivation of minimal height, or None when the fact does not hold (or does
        not follow from the inputs: a table written by hand)."""
        row = self._row(pred, row)
        if not self.holds(pred, row):
            return None
        leaf = self._leaf(pred, row)
        if leaf is not None:
            return leaf
        limit = sum(len(self.db.relations[p]) for p in self.prog.idb) + 1
        for bound in range(1, limit + 1):
            if self._derivable((pred, row), bound):
                return self._tree((pred, row))
        return None

    def alternatives(self, pred: str, row: Row, limit: int) -> list[Derivation]:
        """Up to ``limit`` derivations through different rule instances at the root, each
        child explained at its minimal height; the first is of minimal height."""
        first = self.explain(pred, row)
        if first is None or first.rule is None:
            return [first] if first is not None else []
        out = [first]
        row = self._row(pred, row)
        seen = {self._instance_key(first)}
        for rule in self.rules.get(pred, ()):
            for env in self._instances(rule, row):
                if len(out) >= limit:
                    return out
                kids = [self.explain(p, r) for p, r in self._children(rule, env)]
                if any(k is None for k in kids):
                    continue
                tree = Derivation(pred, row, rule, "", [k for k in kids if k is not None],
                                  self._conditions(rule, env))
                key = self._instance_key(tree)
                if key not in seen:
                    seen.add(key)
                    out.append(tree)
        return out

    def why_not(self, pred: str, row: Row) -> list[str]:
        """For an absent fact: per rule for ``pred``, the first body item that no
        instance gets past, with the bindings that reach it."""
        row = self._row(pred, row)
        if self.holds(pred, row):
            return [f"{format_fact(pred, row)[:-1]} holds"]
        rules = self.rules.get(pred, ())
        if not rules:
            what = "an input relation" if pred in self.prog.edb else "a relation no rule defines"
            return [f"{format_fact(pred, row)[:-1]} is not in {pred} ({what})"]
        return [self._blocked(rule, row) for rule in rules]

    # -- derivations ---------------------------------------------------------------------
    def _leaf(self, pred: str, row: Row) -> Derivation | None:
        if row in self.program_facts.get(pred, ()):
            return Derivation(pred, row, source="program")
        if pred in self.prog.edb:
            return Derivation(pred, row, source="edb")
        return None

    def _derivable(self, fact: Fact, bound: int) -> bool:
        pred, row = fact
        if row not in self.db.relations[pred]:
            return False
        if self._leaf(pred, row) is not None:
            return True
        found = self._found.get(fact)
        if found is not None and found[0] <= bound:
            return True
        if bound <= 0 or self._failed.get(fact, -1) >= bound:
            return False
        for rule in self.rules.get(pred, ()):
            for env in self._instances(rule, row):
                kids = self._children(rule, env)
                if all(self._derivable(k, bound - 1) for k in kids):
                    height = 1 + max((self._height(k) for k in kids), default=0)
                    # (read again: the children's search may have found this fact lower,
                    # through another instance; keeping this one over it would make a
                    # derivation that reaches itself)
                    found = self._found.get(fact)
                    if found is None or height < found[0]:
                        self._found[fact] = (height, rule, env)
                    return True
        self._failed[fact] = bound
        return False

    def _height(self, fact: Fact) -> int:
        if self._leaf(*fact) is not None:
            return 0
        return self._found[fact][0]

    def _tree(self, fact: Fact) -> Derivation:
        pred, row = fact
        leaf = self._leaf(pred, row)
        if leaf is not None:
            return leaf
        _, rule, env = self._found[fact]
        kids = [self._tree(k) for k in self._children(rule, env)]
        return Derivation(pred, row, rule, "", kids, self._conditions(rule, env))

    def _instances(self, rule: Rule, row: Row) -> Iterator[Env]:
        """The rule's satisfying assignments whose head is ``row`` (for an aggregate rule,
        one: the group's members are its children)."""
        bound = _bind_head(rule, row)
        if bound is None:
            return
        envs = self._join(bound)
        if rule.aggregate is None:
            yield from envs
            return
        if envs:
            yield {"#group": envs}  # type: ignore[dict-item]

    def _join(self, rule: Rule) -> list[Env]:
        """Every satisfying assignment of ``rule``'s body, with all its variables (the
        join would stop at the first witness of variables its head does not keep)."""
        names: set[str] = set()
        for item in rule.body:
            if isinstance(item, Atom | Compare):
                names |= item.vars
        head = Atom("#explain", tuple(Var(n) for n in sorted(names)))
        prep = prepare(Rule(head, rule.body, None, rule.loc, rule.casts))
        sources = [self.db.relations[a.pred] for a in prep.atoms]
        plan = build_plan(prep, {i: len(s) for i, s in enumerate(sources)}, self.db.probe)
        relations = [self.db.index(s, plan.perms[i]) for i, s in enumerate(sources)]
        envs: list[Env] = []
        leapfrog_triejoin(plan, relations, lambda env: envs.append(dict(env)), self.stats)
        return envs

    def _children(self, rule: Rule, env: Env) -> list[Fact]:
        group = env.get("#group")
        envs = group if isinstance(group, list) else [env]
        out: dict[Fact, None] = {}
        for e in envs:
            for item in rule.body:
                if isinstance(item, Atom):
                    out[(item.pred, self._row(item.pred, _atom_row(item, e)))] = None
        return list(out)

    def _conditions(self, rule: Rule, env: Env) -> list[str]:
        group = env.get("#group")
        e = group[0] if isinstance(group, list) else env
        out = []
        for item in rule.body:
            if isinstance(item, Negation):
                out.append(f"not {_show_atom(item.atom, e)}")
            elif isinstance(item, Compare):
                out.append(f"{item} with {_bindings(item.vars, e)}")
        if rule.aggregate is not None and isinstance(group, list):
            out.append(f"{rule.aggregate} over {len(group)} members")
        return out

    def _instance_key(self, tree: Derivation) -> tuple[object, ...]:
        return (id(tree.rule), tuple((c.pred, c.row) for c in tree.children))

    def _blocked(self, rule: Rule, row: Row) -> str:
        where = f"rule at {rule.loc}" if rule.loc is not None else f"rule {rule}"
        fact = format_fact(rule.head.pred, row)[:-1]
        bound = _bind_head(rule, row)
        if bound is None:
            return f"{where}: its head {rule.head} cannot be {fact}"
        prefix: list[BodyItem] = list(bound.body[: len(bound.body) - len(rule.body)])
        known = {c.left.name for c in prefix if isinstance(c, Compare) and isinstance(c.left, Var)}
        pending: list[BodyItem] = []
        probe = Atom("#why", ())
        for item in rule.body:
            pending.append(item)
            ready = next((it for it in pending if _ready(it, known)), None)
            while ready is not None:  # items join the prefix once their variables are bound
                pending.remove(ready)
                prefix.append(ready)
                known |= _binds(ready, known)
                if _has_positive(prefix) and not self._join(
                        Rule(probe, tuple(prefix), casts=rule.casts)):
                    return f"{where}: no instance of {fact} gets past {ready}"
                ready = next((it for it in pending if _ready(it, known)), None)
        if rule.aggregate is not None:
            return f"{where}: the group of {fact} has another {rule.aggregate.func}"
        return f"{where}: every body item holds for {fact}, yet it is absent (stale tables?)"

    def _row(self, pred: str, row: Row) -> Row:
        """``row`` as ``pred`` holds it: values coerced into its columns, and a whole
        float in an int column the int (a variable of an int and a float column is a
        float, ``Rule.casts``: the int atom's fact holds the int)."""
        schema = self.prog.schemas[pred]
        return tuple(
            int(v) if c.type == "int" and isinstance(v, float) and v.is_integer()
            else coerce(v, c.type)
            for v, c in zip(row, schema.columns, strict=True))


def _bind_head(rule: Rule, row: Row) -> Rule | None:
    """``rule`` with ``x = value`` added for each head variable (aggregate result aside);
    None when a head constant or a repeated variable cannot match ``row``."""
    args = rule.head.args
    if rule.aggregate is not None:
        args = args[:-1]
        row = row[:-1]
    binds: dict[str, Value] = {}
    for arg, value in zip(args, row, strict=True):
        if isinstance(arg, Const):
            if arg.value != value:
                return None
        elif arg.name in binds:
            if binds[arg.name] != value:
                return None
        else:
            binds[arg.name] = value
    extra = tuple(Compare("=", Var(name), Const(v)) for name, v in binds.items())
    return Rule(rule.head, extra + rule.body, rule.aggregate, rule.loc, rule.casts)


def _has_positive(items: list[BodyItem]) -> bool:
    return any(isinstance(i, Atom) for i in items)


def _ready(item: BodyItem, known: set[str]) -> bool:
    """``item`` can be checked once the variables in ``known`` are bound (an atom always;
    an ``=`` that assigns its one unbound variable too)."""
    if isinstance(item, Atom):
        return True
    if isinstance(item, Negation):
        return all(v in known or v.startswith("_") for v in item.atom.vars)
    free = item.vars - known
    if not free:
        return True
    if item.op == "=" and len(free) == 1:
        return any(isinstance(side, Var) and side.name in free for side in (item.left, item.right))
    return False


def _binds(item: BodyItem, known: set[str]) -> set[str]:
    if isinstance(item, Atom):
        return set(item.vars)
    if isinstance(item, Compare):
        return set(item.vars) - known
    return set()


def _atom_row(atom: Atom, env: Mapping[str, Value]) -> Row:
    return tuple(env[a.name] if isinstance(a, Var) else a.value for a in atom.args)


def _show_atom(atom: Atom, env: Mapping[str, Value]) -> str:
    args = []
    for a in atom.args:
        if isinstance(a, Var) and a.name in env:
            args.append(format_value(env[a.name]))  # (as facts write it: "a", not 'a')
        else:
            args.append(str(a))
    return f"{atom.pred}({', '.join(args)})"


def _bindings(names: frozenset[str], env: Mapping[str, Value]) -> str:
    return ", ".join(f"{n} = {format_value(env[n])}" for n in sorted(names) if n in env)


def check_condition(item: Compare, env: Mapping[str, Value]) -> bool:
    """``item`` holds under ``env`` (every variable bound)."""
    left, right = eval_expr(item.left, env), eval_expr(item.right, env)
    return left is not None and right is not None and compare(item.op, left, right)


def render(
    tree: Derivation,
    functional: frozenset[str] = frozenset(),
    note: Callable[[Derivation], str] | None = None,
) -> list[str]:
    """The tree as indented lines: each fact, the rule that derived it (file:line) or
    where it comes from (and ``note(node)`` after an input fact), and the conditions its
    instance met."""
    lines: list[str] = []

    def walk(node: Derivation, prefix: str, last: bool, top: bool) -> None:
        text = format_fact(node.pred, node.row, node.pred in functional)[:-1]
        how = (
            f"[{node.source} fact]" if node.rule is None
            else f"[rule {node.rule.loc}]" if node.rule.loc is not None
            else f"[rule {node.rule}]"
        )
        if node.rule is None and note is not None:
            how = f"{how} {note(node)}".rstrip()
        branch = "" if top else ("└─ " if last else "├─ ")
        lines.append(f"{prefix}{branch}{text}   {how}")
        inner = prefix if top else prefix + ("   " if last else "│  ")
        for cond in node.conditions:
            lines.append(f"{inner}   · {cond}")
        for i, child in enumerate(node.children):
            walk(child, inner, i == len(node.children) - 1, False)

    walk(tree, "", True, True)
    return lines
