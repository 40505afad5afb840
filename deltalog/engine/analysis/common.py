"""What the analysis passes share: where an error points, fresh variables, and every use
of a predicate in a program."""

from deltalog.engine.errors import Loc
from deltalog.engine.syntax.ast import Atom, Negation, Program


def is_fresh(name: str) -> bool:
    """A variable the parser made (for ``_`` or an expression), not one the user wrote."""
    return name.startswith("_")


def location(loc: Loc | None, fallback: str) -> Loc | str:
    return loc if loc is not None else fallback


def collect_uses(program: Program) -> list[tuple[Atom, str]]:
    """Every atom of the program with where it stands: "fact", "head" or "body"."""
    uses: list[tuple[Atom, str]] = [(f, "fact") for f in program.facts]
    for rule in program.rules:
        uses.append((rule.head, "head"))
        for item in rule.body:
            if isinstance(item, Atom):
                uses.append((item, "body"))
            elif isinstance(item, Negation):
                uses.append((item.atom, "body"))
    return uses

