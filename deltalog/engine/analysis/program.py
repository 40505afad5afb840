"""The analyzed program: what every evaluator (leapfrog triejoin, naive, Spark) starts
from. Schemas for every relation, the EDB/IDB split, strata in evaluation order, facts."""

from dataclasses import dataclass, field

from deltalog.engine.syntax.ast import Column, Program, Rule
from deltalog.engine.values import Row


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
    facts: dict[str, frozenset[Row]] = field(default_factory=dict)

    def relation_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.schemas))

