"""One error hierarchy with stable codes, each carrying where it happened.

DL1xx syntax, DL2xx analysis, DL3xx data. ``str(err)`` is the user-facing line
``FILE:LINE:COL: error DLnnn: message`` (or ``WHERE: error DLnnn: message`` for data).
"""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Loc:
    """A position in a source file (1-based line and column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class DeltalogError(Exception):
    """Base class: a stable code, a message, and where it happened."""

    code = "DL000"  # GENERAL below

    def __init__(self, message: str, where: Loc | str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        prefix = f"{self.where}: " if self.where is not None else ""
        return f"{prefix}error {self.code}: {self.message}"


# The registry: every code, one meaning each. The README's "Error codes" table lists the
# same codes (a test checks both, and that no other module spells a code out).
CODES: dict[str, str] = {}


def _code(code: str, meaning: str) -> str:
    if code in CODES:
        raise ValueError(f"error code {code} registered twice")
    CODES[code] = meaning
    return code


GENERAL = _code("DL000", "an error without a more precise code")
SYNTAX_UNEXPECTED = _code("DL101", "syntax: a token the grammar does not expect here")
SYNTAX_BAD_TOKEN = _code("DL102", "syntax: characters that form no token")
SYNTAX_BAD_LITERAL = _code("DL103", "syntax: a malformed literal (string escape, number)")
NOT_UTF8 = _code("DL104", "a program, script or data file that is not UTF-8 text")
INPUT_LIMIT = _code(
    "DL105",
    "an input past a documented limit (nesting depth, columns, variables in a rule, CSV field"
    " size)",
)
ANALYSIS = _code("DL200", "analysis: the program is not valid")
UNSAFE_VARIABLE = _code("DL201", "a variable not bound by a positive body atom")
NOT_STRATIFIABLE = _code("DL202", "recursion through negation or an aggregate")
ARITY_MISMATCH = _code("DL203", "a predicate used with another number of arguments")
TYPE_MISMATCH = _code("DL204", "a value or variable of another type than declared")
DUPLICATE_DECL = _code("DL205", "a predicate declared twice")
UNDECLARED = _code(
    "DL206", "a predicate that needs a declaration has none, or one read that nothing defines"
)
FUNCTIONAL_MISMATCH = _code("DL207", "a functional predicate used as a relation, or the reverse")
BAD_AGGREGATE = _code("DL208", "a malformed aggregate")
EDB_HEAD = _code("DL209", "a rule whose head is an EDB predicate")
DATA = _code("DL300", "data: an input cannot be used")
BAD_VALUE = _code("DL301", "a fact or row whose values do not fit the declared columns")
FUNCTIONAL_CONFLICT = _code("DL302", "two values for one key of a functional predicate")
BAD_HEADER = _code("DL303", "a CSV header that does not name the declared columns")
MISSING_INPUT = _code("DL304", "an input table does not exist")
CONCURRENT = _code("DL305", "another run of the same stratum holds its lock")
BAD_INPUT = _code("DL306", "an EDB table does not match its declaration (schema, null, NaN, inf)")
CHANGE_MISFIT = _code("DL307", "an IDB change deletes rows its table does not hold")
VALUE_OUT_OF_RANGE = _code("DL308", "a derived value its table's column cannot store")
HISTORY_LOST = _code("DL309", "the change between two table versions cannot be read any more")
TXN_TAKEN = _code("DL310", "the run's commit is already in the table (another run applied it)")
TABLE_UNREADABLE = _code("DL311", "a table version whose data files are missing or damaged")
NO_FIXPOINT = _code("DL312", "a recursion still deriving facts at the iteration limit asked for")
TABLE_SHAPE = _code("DL313", "an IDB table whose columns are not the ones the program defines")
STATE_UNWRITABLE = _code("DL314", "the saved state's folder cannot be written or locked")
TABLE_UNWRITABLE = _code("DL315", "a table's files cannot be written (storage full, permissions)")
BAD_BINDING = _code("DL401", "pipeline.toml does not match the program, or is not valid TOML")
BAD_PROJECT = _code("DL402", "a [tool.deltalog] table in pyproject.toml that is not valid")
NOT_EMPTY = _code("DL403", "deltalog init into a folder that is not empty")
UNSUPPORTED = _code("DL900", "not supported")
NOT_SUPPORTED = _code("DL901", "a construct this strategy or backend does not support")


class DeltalogSyntaxError(DeltalogError):
    code = SYNTAX_UNEXPECTED


class AnalysisError(DeltalogError):
    code = ANALYSIS


class DataError(DeltalogError):
    code = DATA
    rows: tuple[tuple[Any, ...], ...] = ()  # the rows at fault, when there are some


class NotSupportedError(DeltalogError):
    code = UNSUPPORTED


def no_fixpoint(preds: tuple[str, ...], iterations: int) -> DataError:
    """DL312: a recursion still deriving facts at the iteration limit asked for."""
    return DataError(
        f"the recursion of {', '.join(preds)} still derives new facts "
        f"after {iterations} iterations (the limit asked for); with arithmetic "
        "in a recursive rule a program can derive facts without end",
        preds[0],
        NO_FIXPOINT,
    )
