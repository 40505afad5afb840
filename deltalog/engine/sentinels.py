"""The two seek sentinels: ``BOTTOM`` is less and ``TOP`` greater than every value (−∞ and
+∞ in sensitivity intervals, and the ends of seeks: a prefix with ``TOP`` at the end skips
a subtree)."""

from typing import Any


class _Bottom:
    """Less than every value (−∞ in sensitivity intervals and seeks)."""

    __slots__ = ()

    def __lt__(self, other: Any) -> bool:
        return other is not self

    def __le__(self, other: Any) -> bool:
        return True

    def __gt__(self, other: Any) -> bool:
        return False

    def __ge__(self, other: Any) -> bool:
        return other is self

    def __repr__(self) -> str:
        return "-inf"

    def __reduce__(self) -> str:
        return "BOTTOM"  # copies as the module's singleton: identity checks keep working


class _Top:
    """Greater than every value (+∞)."""

    __slots__ = ()

    def __lt__(self, other: Any) -> bool:
        return False

    def __le__(self, other: Any) -> bool:
        return other is self

    def __gt__(self, other: Any) -> bool:
        return other is not self

    def __ge__(self, other: Any) -> bool:
        return True

    def __repr__(self) -> str:
        return "+inf"

    def __reduce__(self) -> str:
        return "TOP"


BOTTOM: Any = _Bottom()
TOP: Any = _Top()
