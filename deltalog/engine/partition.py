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

Anything else (non-linear recursion such as ``tc(x, z) :- tc(x, y), tc(y, z)``) stays in
one process; ``Partitioning.reason`` says why, for a run's notes. The planner is pure: it
reads the program and, when known, the relations' sizes (rows), to decide what to
broadcast (inputs of at most ``broadcast_limit`` rows; all inputs when sizes are unknown)
and which plan ships fewer rows.
"""

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.syntax.ast import Atom, Negation, Var

BROADCAST_LIMIT = 1_000_000  # rows: an input at most this large may be copied everywhere
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

    def describe(self) -> str:
        if self.kind == "key":
            cols = ", ".join(f"{p} by column {c + 1}" for p, c in sorted(self.columns.items()))
            copied = (f"; broadcast: {', '.join(sorted(self.broadcast))}" if self.broadcast
                      else "")
            return f"partitioned by key ({cols}{copied})"
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


def _fits(stratum: Stratum, columns: Mapping[str, int], broadcast: frozenset[str]) -> bool:
    for rule in stratum.rules:
        head_var = _key_var(rule.head, columns[rule.head.pred])
        if head_var is None or head_var.startswith("_"):
            return False
        if rule.aggregate is not None and columns[rule.head.pred] == len(rule.head.args) - 1:
            return False  # partitioned on the aggregate's value, not on a group key
        for atom, _ in _body_atoms(rule.body):
            if atom.pred in broadcast:
                continue
            if _key_var(atom, columns[atom.pred]) != head_var:
                return False
    return True


def plan_partitioning(
    prog: AnalyzedProgram,
    stratum: Stratum,
    sizes: Mapping[str, int] | None = None,
    broadcast_limit: int = BROADCAST_LIMIT,
) -> Partitioning:
    """The partitioning of ``stratum`` that broadcasts the fewest rows (a key plan when
    there is one; else a hypercube for a single non-recursive rule; else single)."""
    own = set(stratum.preds)
    inputs = sorted({a.pred for r in stratum.rules for a, _ in _body_atoms(r.body)} - own)
    if any(prog.schemas[p].arity == 0 for p in (*own, *inputs)):
        return Partitioning("single", "a relation without columns")

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
            if not _fits(stratum, columns, broadcast):
                continue
            cost = sum(size(p) for p in broadcast) if sizes is not None else len(broadcast)
            if best is None or cost < best[0]:
                best = (cost, Partitioning(
                    "key", "every rule keeps one variable in the partition column of its "
                    "head and of every partitioned atom", columns, broadcast))
    if best is not None:
        return best[1]
    why = _no_key_reason(prog, stratum)
    if not stratum.recursive and len(stratum.rules) == 1:
        return _hypercube(stratum, why)
    return Partitioning("single", why)


def _no_key_reason(prog: AnalyzedProgram, stratum: Stratum) -> str:
    own = set(stratum.preds)
    for rule in stratum.rules:
        mine = [a for a, _ in _body_atoms(rule.body) if a.pred in own]
        if len(mine) > 1:
            return (f"rule at {rule.loc}: non-linear recursion ({len(mine)} atoms of the "
                    "stratum in one body) joins partitions with each other")
        if rule.aggregate is not None and not rule.head.args[:-1]:
            return f"rule at {rule.loc}: an aggregate over the whole relation (no group key)"
    return ("no column choice keeps one variable in the partition column of every rule's "
            "head and partitioned atoms (and the inputs that would need a copy everywhere "
            "are too large to broadcast)")


def _hypercube(stratum: Stratum, why: str, partitions: int = 8) -> Partitioning:
    """Shares for the rule's variables (powers of two whose product is ``partitions``) that
    ship the fewest row copies, all atoms taken as equally large."""
    rule = stratum.rules[0]
    atoms = [a for a, neg in _body_atoms(rule.body) if not neg]
    variables = sorted({a.name for atom in atoms for a in atom.args
                        if isinstance(a, Var) and not a.name.startswith("_")})
    if not variables or len(atoms) < 2:
        return Partitioning("single", why)
    bits = partitions.bit_length() - 1
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
