"""Reading a saved engine state without running code from the file.

The engine's state is an object graph (relations, indexes, support counts, sensitivity
intervals, DBSP births) written with pickle. Plain ``pickle.loads`` would call any function
a crafted file names; this reader resolves only what the engine itself defines (and the
engine does no I/O), the containers and numbers it is built of, sortedcontainers'
collections and numpy arrays, and refuses every other name with ``UnsafeState`` (the
standard library documents this as "restricting globals"). A file that is not a valid
state still fails, and the caller rebuilds the state from the tables.
"""

import importlib
import io
import pickle
from typing import Any

# Non-engine names a state may hold, by module: containers, numbers, min/max (kept as the
# order of a scan tree), a seeded random generator (kept by a randomized index),
# sortedcontainers' collections, numpy arrays (their reconstructors, type and dtypes).
_ALLOWED: dict[str, frozenset[str]] = {
    "builtins": frozenset(
        {"set", "frozenset", "dict", "list", "tuple", "int", "float", "str", "bytes",
         "bytearray", "bool", "complex", "slice", "range", "object", "min", "max"}
    ),
    "collections": frozenset({"defaultdict", "OrderedDict", "Counter", "deque"}),
    "fractions": frozenset({"Fraction"}),
    "random": frozenset({"Random"}),
    "sortedcontainers.sortedlist": frozenset({"SortedList", "SortedKeyList"}),
    "sortedcontainers.sorteddict": frozenset({"SortedDict"}),
    "sortedcontainers.sortedset": frozenset({"SortedSet"}),
    "numpy": frozenset({"ndarray", "dtype"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy.core.numeric": frozenset({"_frombuffer"}),
    "numpy._core.numeric": frozenset({"_frombuffer"}),
    "numpy.dtypes": frozenset(
        {"Int8DType", "Int16DType", "Int32DType", "Int64DType", "UInt8DType", "UInt16DType",
         "UInt32DType", "UInt64DType", "Float32DType", "Float64DType", "BoolDType",
         "ObjectDType", "StrDType", "BytesDType"}
    ),
    "copyreg": frozenset({"_reconstructor"}),
}


class UnsafeState(pickle.UnpicklingError):
    """The state names something outside what an engine state is made of."""


def _engine_name(module: str, name: str) -> Any:
    """A class or function defined in an engine module, or a module-level instance of an
    engine class (the ``BOTTOM`` / ``TOP`` sentinels); never a name an engine module
    imported from elsewhere. The engine does no I/O, so none of these can reach outside."""
    if "." in name:
        raise UnsafeState(f"dotted name {module}.{name} in a saved state")
    obj = getattr(importlib.import_module(module), name, None)
    if obj is not None and getattr(obj, "__module__", None) == module:
        return obj  # a class or function defined there
    if obj is not None and type(obj).__module__ == module and not callable(obj):
        return obj
    raise UnsafeState(f"{module}.{name} is not defined by the engine")


class _Reader(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "engine" or module.startswith("engine."):
            return _engine_name(module, name)
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise UnsafeState(f"a saved state may not name {module}.{name}")


def loads(blob: bytes) -> Any:
    """Unpickle ``blob``, resolving only the names an engine state is made of; raises
    ``UnsafeState`` (a ``pickle.UnpicklingError``) on any other."""
    return _Reader(io.BytesIO(blob)).load()


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
