"""Evaluate a program from scratch on the columnar core: values coded as order-preserving
int64 (``encoding``), relations as sorted code arrays (``rows``), every rule body a
compiled leapfrog triejoin (``rules``, ``kernels``), stratum by stratum, recursive strata
by semi-naive iteration whose rounds merge their new rows into the sorted relations.

``evaluate_columns`` returns the relations as columns of values; ``deltalog.engine.evaluate``
(what ``deltalog eval`` and the ``recompute`` strategy run) uses it and gives Python rows.
A variable joining an int column and a float column (a float, ``Rule.casts``) is read
from the int columns as an int variable ``x~int`` with ``x = x~int`` added
(``typecheck.uncast``): the join binds whichever comes second from the first, converted
(``semantics.bind_as``), and looks it up in its atoms. A program the columnar core cannot
code (an integer beyond 64 bits) raises ``NotColumnar`` with the reason.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.analysis.program import AnalyzedProgram, RelationSchema, Stratum
from deltalog.engine.analysis.typecheck import uncast
from deltalog.engine.columnar.encoding import Codes, Column, Dictionary, NotColumnar
from deltalog.engine.columnar.rows import I64, Relation
from deltalog.engine.columnar.rules import CompiledRule
from deltalog.engine.errors import no_fixpoint
from deltalog.engine.heads import functional_conflict
from deltalog.engine.join.plan import prepare
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.syntax.ast import Atom, BinOp, Compare, Const, Expr, Negation, Rule
from deltalog.engine.values import Row, Value


@dataclass(frozen=True)
class Columns:
    """An input relation as columns (declared order), each a numpy array, a sequence of
    values or a ``Dictionary``."""

    columns: Sequence[Column]

    rows_of_nullary: int = 0  # the rows of a relation of no columns (0 or 1 distinct)

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else self.rows_of_nullary

    def check(self, name: str, arity: int) -> None:
        """``ValueError`` unless these are ``arity`` columns of one length (of relation
        ``name``)."""
        if len(self.columns) != arity:
            raise ValueError(f"{len(self.columns)} columns for {name}, of arity {arity}")
        lengths = sorted({len(c) for c in self.columns})
        if len(lengths) > 1:
            raise ValueError(f"columns of {' and '.join(map(str, lengths))} rows for {name}")

    def rows(self) -> list[Row]:
        """The rows as Python tuples."""
        cols = [np.asarray(c.values, dtype=object)[np.asarray(c.indices)].tolist()
                if isinstance(c, Dictionary)
                else (c.tolist() if isinstance(c, np.ndarray) else list(c))
                for c in self.columns]
        if not cols:
            return [()] * self.rows_of_nullary
        return list(zip(*cols, strict=True))


Input = Iterable[Row] | Columns


@dataclass
class Result:
    """Relations on codes, and how to read them as values."""

    codes: Codes
    schemas: Mapping[str, RelationSchema]
    relations: dict[str, Relation] = field(default_factory=dict)

    def columns(self, pred: str) -> list[NDArray[Any]]:
        """The relation's columns as values (int64 and float64 arrays, arrays of str), the
        rows in no particular order."""
        rows = self.relations[pred].rows
        return [self.codes.decode(rows[:, i], c.type)
                for i, c in enumerate(self.schemas[pred].columns)]

    def rows(self, pred: str) -> frozenset[Row]:
        rel = self.relations[pred]
        if not rel.arity:
            return frozenset([()] * min(len(rel), 1))
        cols = [c.tolist() for c in self.columns(pred)]
        return frozenset(zip(*cols, strict=True))


def _expr_constants(e: Expr) -> list[Value]:
    if isinstance(e, Const):
        return [e.value]
    if isinstance(e, BinOp):
        return _expr_constants(e.left) + _expr_constants(e.right)
    return []


def rule_constants(rule: Rule) -> list[Value]:
    """The constants of a rule (its head's, its atoms', its comparisons')."""
    out = [v for a in rule.head.args for v in _expr_constants(a)]
    for item in rule.body:
        atom = item.atom if isinstance(item, Negation) else item
        if isinstance(atom, Atom):
            out += [v for a in atom.args for v in _expr_constants(a)]
        elif isinstance(item, Compare):
            out += _expr_constants(item.left) + _expr_constants(item.right)
    return out


def rule_strings(rule: Rule) -> list[str]:
    """The string constants of a rule (its head's, its atoms', its comparisons')."""
    return [v for v in rule_constants(rule) if isinstance(v, str)]


def encode_table(codes: Codes, schema: RelationSchema, cols: Sequence[Column], n: int) -> I64:
    """The (n, arity) table of codes of ``n`` rows of ``schema`` given by column."""
    if not schema.arity or not n:
        return np.zeros((n if not schema.arity else 0, schema.arity), np.int64)
    return np.stack([codes.encode(col, c.type)
                     for col, c in zip(cols, schema.columns, strict=True)], axis=1)


def _as_columns(rows: Input, arity: int) -> tuple[list[Column], int]:
    """The columns of an input, and its number of rows (a nullary relation has none)."""
    if isinstance(rows, Columns):
        if len(rows.columns) != arity:
            raise ValueError(f"{len(rows.columns)} columns for a relation of {arity}")
        return list(rows.columns), len(rows)
    listed = rows if isinstance(rows, list) else list(rows)
    for row in listed[:1]:
        if len(row) != arity:
            raise ValueError(f"a row of {len(row)} values for a relation of {arity}")
    return [list(map(itemgetter(i), listed)) for i in range(arity)], len(listed)


class ColumnarEvaluator:
    def __init__(self, prog: AnalyzedProgram, max_iterations: int | None = None,
                 stats: JoinStats | None = None):
        self.prog = prog
        self.max_iterations = max_iterations
        self.stats = stats if stats is not None else JoinStats()

    def run(self, inputs: Mapping[str, Input], preds: Iterable[str] | None = None) -> Result:
        prog = self.prog
        given: dict[str, tuple[list[Column], int]] = {
            name: _as_columns(rows, prog.schemas[name].arity)
            for name, rows in inputs.items() if name in prog.schemas
        }
        strings = []
        for name, (cols, _) in given.items():
            for col, c in zip(cols, prog.schemas[name].columns, strict=True):
                if c.type == "string":
                    strings.append(Codes.strings_of(col))
        for name, facts in prog.facts.items():
            for i, c in enumerate(prog.schemas[name].columns):
                if c.type == "string":
                    strings.append(Codes.strings_of([r[i] for r in facts]))
        consts = [s for rule in prog.program.rules for s in rule_strings(rule)]
        strings.append(Codes.strings_of(consts))
        codes = Codes(strings)
        result = Result(codes, prog.schemas)
        rels = result.relations
        for name, schema in prog.schemas.items():
            parts: list[I64] = []
            given_facts = prog.facts.get(name)
            if given_facts:
                parts.append(encode_table(codes, schema, *_as_columns(given_facts, schema.arity)))
            if name in given:
                parts.append(encode_table(codes, schema, *given[name]))
            rels[name] = (Relation.of(np.concatenate(parts)) if parts
                          else Relation.empty(schema.arity))
        for name in prog.edb:
            self._check_functional(result, name)
        compiled: dict[int, CompiledRule] = {}

        def column_type(pred: str, i: int) -> str:
            return prog.schemas[pred].columns[i].type

        for stratum in prog.strata:
            if all(p in inputs for p in stratum.preds):
                continue
            for rule in stratum.rules:
                compiled[id(rule)] = CompiledRule(prog, prepare(uncast(rule, column_type)),
                                                  codes, rels)
            self._stratum(stratum, rels, compiled)
            for name in stratum.preds:
                self._check_functional(result, name)
        wanted = prog.idb if preds is None else tuple(preds)
        result.relations = {name: rels[name] for name in wanted}
        return result

    def _check_functional(self, result: Result, name: str) -> None:
        schema = self.prog.schemas[name]
        if not schema.functional:
            return
        rows = result.relations[name].index(tuple(range(schema.arity)))  # sorted
        k = schema.key_arity
        if len(rows) < 2:
            return
        same = np.all(rows[1:, :k] == rows[:-1, :k], axis=1)
        hit = np.flatnonzero(same)
        if len(hit):
            i = int(hit[0])
            pair = [tuple(result.codes.python(rows[j:j + 1, c], col.type)[0]
                          for c, col in enumerate(schema.columns)) for j in (i, i + 1)]
            raise functional_conflict(name, pair[0], pair[1])

    def _stratum(self, stratum: Stratum, rels: dict[str, Relation],
                 compiled: Mapping[int, CompiledRule]) -> None:
        own = set(stratum.preds)
        stats = self.stats
        for rule in stratum.rules:
            cr = compiled[id(rule)]
            sources = [rels[a.pred] for a in cr.prep.atoms]
            cr.run(sources, frozenset(), stats, rels[rule.head.pred])
        delta = {p: rels[p].freeze() for p in stratum.preds}
        if not stratum.recursive:
            return
        recursive_rules = [
            compiled[id(r)] for r in stratum.rules
            if any(a.pred in own for a in compiled[id(r)].prep.atoms)
        ]
        iterations = 1
        while any(len(d) for d in delta.values()):
            if self.max_iterations is not None and iterations >= self.max_iterations:
                raise no_fixpoint(stratum.preds, iterations)
            iterations += 1
            for cr in recursive_rules:
                atoms = cr.prep.atoms
                for i, atom in enumerate(atoms):
                    if atom.pred not in own or not len(delta[atom.pred]):
                        continue
                    sources = [rels[a.pred] for a in atoms]
                    sources[i] = delta[atom.pred]
                    cr.run(sources, frozenset({i}), stats, rels[cr.rule.head.pred])
            delta = {p: rels[p].freeze() for p in stratum.preds}


def evaluate_columns(
    prog: AnalyzedProgram,
    inputs: Mapping[str, Input],
    preds: Iterable[str] | None = None,
    stats: JoinStats | None = None,
    max_iterations: int | None = None,
) -> Result:
    """The IDB relations of ``prog`` (``preds`` of them) on the columnar core; see
    ``deltalog.engine.evaluate.evaluate`` for the arguments. Raises ``NotColumnar``."""
    return ColumnarEvaluator(prog, max_iterations, stats).run(inputs, preds)


__all__ = ["Columns", "Dictionary", "NotColumnar", "Result", "Value", "evaluate_columns"]


_WARM_PROGRAM = """\
.decl e(a: int, b: int)
p1(x, y) :- e(x, y).
p2(x, z) :- e(x, y), e(y, z).
p3(x, y, z) :- e(x, y), e(y, z), e(x, z), x < y.
p4(a) :- e(a, b), e(b, c), e(c, d), e(d, a).
p5(a) :- e(a, b), e(b, c), e(c, d), e(d, f), e(f, a).
path(x, y) :- e(x, y).
path(x, z) :- path(x, y), e(y, z).
n(x) :- e(x, _), !e(_, x).
c[x] = k <- agg<<k = count()>> e(x, _).
w(x, y) :- e(x, y), x > 3000000000000000000.
w(x, y) :- e(x, y), y < -3000000000000000000.
wide(x, y) :- e(x, y), x > 3000000000000000000.
wide(x, z) :- wide(x, y), e(y, z).
long(a) :- e(a, b), e(b, c), e(c, d), e(d, f), e(f, g), e(g, h), e(h, i), e(i, j), e(j, k),
           e(k, l), e(l, m), e(m, n), e(n, o), e(o, q), e(q, r), e(r, s), e(s, a).
"""


def warm() -> None:
    """Compile (or load from numba's cache) the kernels for the shapes most programs
    have: joins of one to five atoms, recursion, negation, an aggregate, rows too wide
    to pack (added to in rounds), a body of more than ``kernels.ATOM_SLOTS`` atoms (its
    relations passed as a typed list: the longest compile, about 30 s). Setup calls it,
    so that a user's first evaluation does not compile."""
    big = 2**62
    edges = [(0, 1), (1, 2), (2, 0), (1, 3), (3, 1), (big, -big), (-big, big)]
    evaluate_columns(load_program(_WARM_PROGRAM, "<warm>"), {"e": edges})
