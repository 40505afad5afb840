"""How a stratum can be split into partitions that are evaluated and maintained apart.

Two plans, after the distributed Datalog engines on Spark:

- **Key partitioning** (the decomposable plans of Shkapsky et al., "Big Data Analytics with
  Datalog Queries on Spark", SIGMOD 2016, §5; Seib and Lausen's "discriminating
  predicates"): every relation the stratum defines is partitioned on one of its columns,
  every input either on one of its columns or broadcast (a copy in every partition), such
  that in every rule one variable stands in the partition column of the head and of every
  partitioned body atom (negated ones included). A partition then derives exactly the
  facts whose key it owns, from its own rows and the broadcast ones, with no exchange
  between partitions during the fixpoint: left-linear recursion partitioned by its source,
  joins that share one variable across all atoms.
- **HyperCube** (Afrati and Ullman, "Optimizing Joins in a Map-Reduce Environment", EDBT
  2010; Beame, Koutris and Suciu's shares): for a non-recursive stratum of one rule
  (triangles), the partitions form a grid with one dimension per variable; a row of an
  atom goes to every cell whose coordinates agree with its values' hashes on the atom's
  variables. Every satisfying assignment meets in exactly one cell.

A rule whose positive atoms would all be broadcast (the base rule ``tc(x, y) :- e(x, y)``
of a closure whose edges are broadcast for its recursive rule) reads, for one of them, a
*local copy* instead: the same table partitioned on the column that holds the head's key, so
each partition derives only the facts it owns (the rows of that key), and no partition
repeats another's work.

``split_stratum`` turns a plan into what the partitions run: the stratum's program with
every local copy (and, for a hypercube, every body atom) reading an input of its own, and
one ``Route`` per input saying which partitions get each of its rows (``key_hash`` of a
value, the same in every process).

Anything else (non-linear recursion such as ``tc(x, z) :- tc(x, y), tc(y, z)``) stays in
one process; ``Partitioning.reason`` says why, for a run's notes. The planner is pure: it
reads the program and, when known, the relations' sizes (rows), to decide what to
broadcast (inputs of at most ``broadcast_limit`` rows; all inputs when sizes are unknown)
and which plan ships fewer rows.
"""

import hashlib
import itertools
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from deltalog.engine.analysis.analyze import analyze
from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.syntax.ast import Atom, Decl, Negation, Program, Rule, Var
from deltalog.engine.values import Row, Value

# rows: an input at most this large may be copied to every partition (about Spark's own
# broadcast-join threshold of 10 MB for rows of a few numbers)
BROADCAST_LIMIT = 200_000
_MAX_PLANS = 20_000  # key plans tried per stratum before giving up the search


@dataclass(frozen=True)
class Partitioning:
    """``kind``: "key", "hypercube" or "single". For "key": ``columns`` maps every
    partitioned relation to its partition column, ``broadcast`` the inputs copied to every
    partition. For "hypercube": ``shares`` maps each variable of the rule to its number of
    coordinates (their product is the number of partitions). ``reason``: why this plan."""

    kind: str
    reason: str
    columns: Mapping[str, int] = field(default_factory=dict)
    broadcast: frozenset[str] = frozenset()
    shares: Mapping[str, int] = field(default_factory=dict)
    # key plans: (rule index, body index, relation, column) of each atom that reads a local
    # copy of its broadcast relation, partitioned on ``column``
    local: tuple[tuple[int, int, str, int], ...] = ()

    def describe(self) -> str:
        if self.kind == "key":
            cols = ", ".join(f"{p} by column {c + 1}" for p, c in sorted(self.columns.items()))
            copied = (f"; broadcast: {', '.join(sorted(self.broadcast))}" if self.broadcast
                      else "")
            own = sorted({f"{p} by column {c + 1}" for _, _, p, c in self.local})
            mine = f"; local copies: {', '.join(own)}" if own else ""
            return f"partitioned by key ({cols}{copied}{mine})"
        if self.kind == "hypercube":
            grid = " x ".join(f"{v}:{n}" for v, n in self.shares.items())
            return f"partitioned as a hypercube ({grid})"
        return f"single process: {self.reason}"


def _body_atoms(rule_body: tuple[object, ...]) -> list[tuple[Atom, bool]]:
    out: list[tuple[Atom, bool]] = []
    for item in rule_body:
        if isinstance(item, Atom):
            out.append((item, False))
        elif isinstance(item, Negation):
            out.append((item.atom, True))
    return out


def _key_var(atom: Atom, col: int) -> str | None:
    arg = atom.args[col]
    return arg.name if isinstance(arg, Var) else None


def _fits(
    prog: AnalyzedProgram, stratum: Stratum, columns: Mapping[str, int],
    broadcast: frozenset[str],
) -> tuple[tuple[int, int, str, int], ...] | None:
    """The local copies that make the plan work, or None when it does not: every rule keeps
    one variable in the partition column of its head and of every partitioned atom, and
    has a positive partitioned atom (or a broadcast one it can read a local copy of). A
    functional relation is partitioned on a key column, so that a second value for a key
    meets the first in one partition."""
    for pred, col in columns.items():
        if col >= prog.schemas[pred].key_arity:
            return None
    local: list[tuple[int, int, str, int]] = []
    for r, rule in enumerate(stratum.rules):
        head_var = _key_var(rule.head, columns[rule.head.pred])
        if head_var is None or head_var.startswith("_"):
            return None
        if rule.aggregate is not None and columns[rule.head.pred] == len(rule.head.args) - 1:
            return None  # partitioned on the aggregate's value, not on a group key
        anchored = False
        for atom, negated in _body_atoms(rule.body):
            if atom.pred in broadcast:
                continue
            if _key_var(atom, columns[atom.pred]) != head_var:
                return None
            anchored = anchored or not negated
        if anchored:
            continue
        copy = next(
            ((r, b, item.pred, c) for b, item in enumerate(rule.body) if isinstance(item, Atom)
             for c in range(prog.schemas[item.pred].key_arity)
             if _key_var(item, c) == head_var),
            None,
        )
        if copy is None:
            return None
        local.append(copy)
    return tuple(local)


def plan_partitioning(
    prog: AnalyzedProgram,
    stratum: Stratum,
    sizes: Mapping[str, int] | None = None,
    broadcast_limit: int = BROADCAST_LIMIT,
    parts: int = 8,
) -> Partitioning:
    """The partitioning of ``stratum`` that broadcasts the fewest rows (a key plan when
    there is one; else a hypercube for a single non-recursive rule; else single)."""
    own = set(stratum.preds)
    inputs = sorted({a.pred for r in stratum.rules for a, _ in _body_atoms(r.body)} - own)
    if any(prog.schemas[p].arity == 0 for p in (*own, *inputs)):
        return Partitioning("single", "a relation without columns")
    if any(p in own for p in prog.facts if prog.facts[p]):
        return Partitioning("single", "the program states facts of the stratum's relations")
    # (a partition reads an input as the rows its route sends it from the table: facts
    # the program states for an input are in no table; an upstream relation's are)
    stated = [p for p in inputs if p in prog.edb and prog.facts.get(p)]
    if stated:
        return Partitioning("single", f"the program states facts of {stated[0]}, an input "
                            "its partitions would read as table rows only")

    def size(p: str) -> int:
        return sizes.get(p, 0) if sizes is not None else 0

    can_copy = [p for p in inputs if sizes is None or size(p) <= broadcast_limit]
    own_choices = [range(prog.schemas[p].arity) for p in sorted(own)]
    input_choices = [
        [*range(prog.schemas[p].arity), *([None] if p in can_copy else [])] for p in inputs
    ]
    best: tuple[int, Partitioning] | None = None
    tried = 0
    for own_cols in itertools.product(*own_choices):
        for in_cols in itertools.product(*input_choices):
            tried += 1
            if tried > _MAX_PLANS:
                break
            columns = dict(zip(sorted(own), own_cols, strict=True))
            columns.update({p: c for p, c in zip(inputs, in_cols, strict=True) if c is not None})
            broadcast = frozenset(p for p, c in zip(inputs, in_cols, strict=True) if c is None)
            local = _fits(prog, stratum, columns, broadcast)
            if local is None:
                continue
            cost = sum(size(p) for p in broadcast) if sizes is not None else len(broadcast)
            if best is None or cost < best[0]:
                best = (cost, Partitioning(
                    "key", "every rule keeps one variable in the partition column of its "
                    "head and of every partitioned atom", columns, broadcast, local=local))
    if best is not None:
        return best[1]
    why = _no_key_reason(prog, stratum, sizes is not None)
    if not stratum.recursive and len(stratum.rules) == 1:
        return _hypercube(stratum, why, parts)
    return Partitioning("single", why)


def _no_key_reason(prog: AnalyzedProgram, stratum: Stratum, sized: bool) -> str:
    own = set(stratum.preds)
    for rule in stratum.rules:
        mine = [a for a, _ in _body_atoms(rule.body) if a.pred in own]
        if len(mine) > 1:
            return (f"rule at {rule.loc}: non-linear recursion ({len(mine)} atoms of the "
                    "stratum in one body) joins partitions with each other")
        if rule.aggregate is not None and not rule.head.args[:-1]:
            return f"rule at {rule.loc}: an aggregate over the whole relation (no group key)"
    return ("no column choice keeps one variable in the partition column of every rule's "
            "head and partitioned atoms" + (
                " (and the inputs that would need a copy everywhere are too large to "
                "broadcast)" if sized else ", even with every input broadcast"))


def _hypercube(stratum: Stratum, why: str, partitions: int = 8) -> Partitioning:
    """Shares for the rule's variables (powers of two whose product is ``partitions``) that
    ship the fewest row copies, all atoms taken as equally large."""
    rule = stratum.rules[0]
    atoms = [a for a, neg in _body_atoms(rule.body) if not neg]
    variables = sorted({a.name for atom in atoms for a in atom.args
                        if isinstance(a, Var) and not a.name.startswith("_")})
    if not variables or len(atoms) < 2:
        return Partitioning("single", why)
    if rule.aggregate is not None or rule.head.functional:
        return Partitioning("single", f"{why}; an aggregate or functional head needs its "
                            "group in one place, which a hypercube does not give")
    if not set(variables) <= rule.head.vars:
        return Partitioning("single", f"{why}; the head drops variables of the join, so "
                            "one fact could be derived in several hypercube cells")
    bits = max(partitions, 1).bit_length() - 1  # the cells: the largest power of two
    best: tuple[float, tuple[int, ...]] | None = None
    for split in itertools.product(range(bits + 1), repeat=len(variables)):
        if sum(split) != bits:
            continue
        share = dict(zip(variables, (1 << b for b in split), strict=True))
        copies = 0.0
        for atom in atoms:
            held = {a.name for a in atom.args if isinstance(a, Var)}
            mine = 1
            for v in held & share.keys():
                mine *= share[v]
            copies += partitions / mine  # each row goes to the cells of the other variables
        if best is None or copies < best[0]:
            best = (copies, split)
    assert best is not None
    shares = {v: 1 << b for v, b in zip(variables, best[1], strict=True)}
    return Partitioning("hypercube", f"no key plan ({why}); a one-rule join: shares",
                        shares=shares)


# -- what the partitions run ----------------------------------------------------------------

_MASK = (1 << 64) - 1


def key_hash(value: Value | None) -> int:
    """A hash of a value that every process computes alike (Python's ``hash`` of a string
    is salted per process): integers (and floats that are whole numbers, so that ``1`` and
    ``1.0`` meet) through SplitMix64, other floats by their bits, strings by BLAKE2b."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        z = (value + 0x9E3779B97F4A7C15) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)
    if isinstance(value, float):
        return key_hash(struct.unpack("<q", struct.pack("<d", value))[0])
    if value is None:
        return 0
    return int.from_bytes(hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest(),
                          "little")


@dataclass(frozen=True)
class Route:
    """Which partitions get a row of one input of a partition's program: ``source`` is the
    table it comes from. A key route (``column`` >= 0) sends a row to one partition, by the
    hash of its value in ``column``; a cube route to every cell that agrees with the row on
    the atom's variables (``dims``: (column, share, stride) of each, ``free``: (share,
    stride) of the grid's other variables); neither: to every partition (broadcast)."""

    source: str
    column: int = -1
    dims: tuple[tuple[int, int, int], ...] = ()
    free: tuple[tuple[int, int], ...] = ()

    def targets(self, row: Row, parts: int) -> list[int]:
        if self.column >= 0:
            return [key_hash(row[self.column]) % parts]
        if not self.dims and not self.free:
            return list(range(parts))
        base = sum((key_hash(row[c]) % share) * stride for c, share, stride in self.dims)
        cells = [base]
        for share, stride in self.free:
            cells = [cell + k * stride for cell in cells for k in range(share)]
        return cells


@dataclass(frozen=True)
class SplitStratum:
    """A stratum as ``parts`` partitions run it: ``program`` (the stratum's rules, with
    local copies and hypercube atoms reading inputs of their own) and, per input of that
    program, its ``Route``. The union of the partitions' results is the stratum's result,
    and every fact is derived in exactly one partition."""

    plan: Partitioning
    parts: int
    program: AnalyzedProgram
    routes: Mapping[str, Route]

    def route(self, source: str) -> list[tuple[str, Route]]:
        """The inputs of the partitions' program that read table ``source``."""
        return [(name, r) for name, r in sorted(self.routes.items()) if r.source == source]


def split_stratum(sub: AnalyzedProgram, plan: Partitioning, parts: int) -> SplitStratum:
    """The partitions' program and routes for ``sub`` (one stratum's program: its rules,
    every relation it reads declared as EDB) under a key or hypercube ``plan``."""
    [stratum] = [s for s in sub.strata if s.rules]
    own = set(stratum.preds)
    rules = list(stratum.rules)
    routes: dict[str, Route] = {}
    copies: dict[str, str] = {}  # new input name -> the relation it copies

    def renamed(rule: Rule, index: int, name: str, source: str) -> Rule:
        copies[name] = source
        body = list(rule.body)
        item = body[index]
        if isinstance(item, Negation):
            body[index] = replace(item, atom=replace(item.atom, pred=name))
        else:
            assert isinstance(item, Atom)
            body[index] = replace(item, pred=name)
        return replace(rule, body=tuple(body))

    if plan.kind == "key":
        for pred, col in plan.columns.items():
            if pred not in own:
                routes[pred] = Route(pred, column=col)
        for pred in plan.broadcast:
            routes[pred] = Route(pred)
        for r, b, pred, col in plan.local:
            name = f"{pred}@{col}"
            rules[r] = renamed(rules[r], b, name, pred)
            routes[name] = Route(pred, column=col)
    elif plan.kind == "hypercube":
        [rule] = rules
        variables = list(plan.shares)
        strides: dict[str, int] = {}
        stride = 1
        for v in variables:
            strides[v] = stride
            stride *= plan.shares[v]
        for b, item in enumerate(rule.body):
            if not isinstance(item, Atom | Negation):
                continue
            atom = item.atom if isinstance(item, Negation) else item
            seen: dict[str, int] = {}
            for c, arg in enumerate(atom.args):
                if isinstance(arg, Var) and arg.name in strides:
                    seen.setdefault(arg.name, c)
            dims = tuple((c, plan.shares[v], strides[v]) for v, c in seen.items())
            free = tuple((plan.shares[v], strides[v]) for v in variables if v not in seen)
            name = f"{atom.pred}@{b}"
            rule = renamed(rule, b, name, atom.pred)
            routes[name] = Route(atom.pred, dims=dims, free=free)
        rules = [rule]
    else:
        raise ValueError(f"a stratum that runs in one process has no split ({plan.reason})")
    read = {a.pred for r in rules for a, _ in _body_atoms(r.body)} - own
    # an input read but not routed by the plan is broadcast; one only its copies read is gone
    routes = {name: routes.get(name, Route(name)) for name in sorted(read)}
    schemas = sub.schemas
    decls = [Decl(n, s.columns, s.functional) for n, s in sorted(schemas.items())
             if n in own or n in routes]
    decls += [Decl(n, schemas[src].columns, schemas[src].functional)
              for n, src in sorted(copies.items()) if n not in schemas]
    program = analyze(Program(tuple(decls), tuple(rules), (), sub.program.file))
    if plan.kind == "hypercube":
        parts = 1
        for share in plan.shares.values():
            parts *= share
    return SplitStratum(plan, parts, program, routes)
