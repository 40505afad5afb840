"""One error hierarchy with stable codes, each carrying where it happened.

DL1xx syntax, DL2xx analysis, DL3xx data. ``str(err)`` is the user-facing line
``FILE:LINE:COL: error DLnnn: message`` (or ``WHERE: error DLnnn: message`` for data).
"""

from dataclasses import dataclass


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

    code = "DL000"

    def __init__(self, message: str, where: Loc | str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        prefix = f"{self.where}: " if self.where is not None else ""
        return f"{prefix}error {self.code}: {self.message}"


class DeltalogSyntaxError(DeltalogError):
    code = "DL101"


class AnalysisError(DeltalogError):
    code = "DL200"


class DataError(DeltalogError):
    code = "DL300"


class NotSupportedError(DeltalogError):
    code = "DL900"


# Stable codes, one place so that tests and docs can refer to them.
SYNTAX_UNEXPECTED = "DL101"
SYNTAX_BAD_TOKEN = "DL102"
SYNTAX_BAD_LITERAL = "DL103"
UNSAFE_VARIABLE = "DL201"
NOT_STRATIFIABLE = "DL202"
ARITY_MISMATCH = "DL203"
TYPE_MISMATCH = "DL204"
DUPLICATE_DECL = "DL205"
UNDECLARED = "DL206"
FUNCTIONAL_MISMATCH = "DL207"
BAD_AGGREGATE = "DL208"
EDB_HEAD = "DL209"
BAD_VALUE = "DL301"
FUNCTIONAL_CONFLICT = "DL302"
BAD_HEADER = "DL303"
MISSING_INPUT = "DL304"
NOT_SUPPORTED = "DL901"
