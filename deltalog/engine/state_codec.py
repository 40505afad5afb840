"""The engine's state as bytes, and back, without pickle: reading a state is reading data.

The state is an object graph (relations, indexes, support counts, sensitivity intervals,
aggregate groups, DBSP births and depths). It is written as MessagePack: scalars, rows
(tuples) and maps natively, and everything else as a typed extension:

- an engine object: the class's ``module.qualname`` and its state (``__getstate__``, as
  pickle would take it); read back by ``cls.__new__(cls)`` and ``__setstate__`` (or the
  attributes set), where ``cls`` must be a class an ``engine`` module defines; a few
  named non-engine classes (``SortedList``, ``Random``, numpy arrays of plain dtypes) are
  rebuilt from their items, never by calling a name the file gives;
- functions kept as values (the order of a scan tree): only ``min``, ``max`` and functions
  an engine module defines, referenced, never called while reading;
- mutable containers and objects by identity: a second reference is written as a
  reference, so shared and cyclic structures come back shared, as they were;
- with a segment store (``dumps(value, sink)``, ``loads(blob, source)``): large sorted
  containers marked ``deltalog.engine.segments.Paged`` as sorted runs, large numpy arrays as array
  segments, and engine objects whose class defines ``__persist__(self, sink) -> ref``
  (plain data, or None to be written inline) and ``__restore__(cls, source, ref)`` as
  that reference; the root written here names them. Circular references into such an
  object are not supported (it is made whole by ``__restore__``).

Bulk containers (a relation's rows, an index, support counts) whose items are plain rows
take one MessagePack call each, in C; the rest is walked here. Nothing in a file can name
code to run: a file that is not a valid state raises ``UnsafeState`` or a decoding error,
and the caller rebuilds the state from the tables.
"""

import importlib
import random
from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import msgpack
import numpy as np
from sortedcontainers import SortedDict, SortedKeyList, SortedList, SortedSet

from deltalog.engine.segments import (
    CONST_EXT,
    CONST_EXTS,
    CONSTS,
    Paged,
    PagedRows,
    SegmentSink,
    SegmentSource,
    sentinel_default,
)

_REF, _OBJ, _LIST, _DICT, _SET, _FROZENSET, _TUPLE, _BIGINT = 1, 2, 3, 4, 5, 6, 7, 8
_SORTEDLIST, _SORTEDKEYLIST, _SORTEDDICT, _SORTEDSET, _DEFAULTDICT = 9, 10, 11, 12, 13
_NDARRAY, _DTYPE, _NPSCALAR, _RANDOM, _FRACTION, _FUNC, _CONST = 14, 15, 16, 17, 18, 19, CONST_EXT
_SEGMENT, _PAGED, _ARRAYREF, _SEGOBJ = 21, 22, 23, 24
# With a segment store (``dumps(value, sink)``): a numpy array of this many bytes or more is
# a segment of its own, mapped when the state is opened, only its changed pages written
# on the next save.
ARRAY_MIN = 1 << 16
# An extension whose bytes pass this size is written out of line, as a segment of its own:
# so a big container deep in the graph is copied once on each side, not once per level
# of the extensions around it.
SEGMENT_MIN = 1 << 16

_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1
_SCALARS = (str, float, bool, bytes, type(None))
# Functions a state may hold as values, besides those an engine module defines.
_BUILTIN_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max}
# defaultdict factories a state may hold.
_FACTORIES: dict[str, Callable[[], Any]] = {
    "int": int, "list": list, "set": set, "dict": dict, "float": float,
}


class UnsafeState(ValueError):
    """The bytes are not an engine state this code wrote (an unknown type or class)."""


_sentinel = sentinel_default  # (the codec writes big ints as its own extension)


def _plain(items: Any) -> bytes | None:
    """``items`` (a sequence) packed in one C call when every item is hashable (so holds no
    mutable container) and plain (scalars, the seek sentinels, tuples of them); else None."""
    try:
        hash(tuple(items))
        return msgpack.packb(items, default=_sentinel, use_bin_type=True)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
        return None


_ENGINE = __name__.rsplit(".", 1)[0]  # this package: deltalog.engine


def _in_engine(module: str) -> bool:
    return module == _ENGINE or module.startswith(_ENGINE + ".")


def _engine_class(module: str, qualname: str) -> Any:
    if not _in_engine(module) or "." in qualname:
        raise UnsafeState(f"a saved state may not name {module}.{qualname}")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not isinstance(cls, type) or cls.__module__ != module:
        raise UnsafeState(f"{module}.{qualname} is not a class the engine defines")
    return cls


def _engine_function(module: str, name: str) -> Callable[..., Any]:
    if module == "builtins" and name in _BUILTIN_FUNCS:
        return _BUILTIN_FUNCS[name]
    if not _in_engine(module) or "." in name:
        raise UnsafeState(f"a saved state may not name the function {module}.{name}")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn) or isinstance(fn, type) or getattr(fn, "__module__", None) != module:
        raise UnsafeState(f"{module}.{name} is not a function the engine defines")
    return fn  # type: ignore[no-any-return]


class _Writer:
    def __init__(self, sink: SegmentSink | None = None) -> None:
        self.sink = sink
        self.segments: list[bytes] = []
        self.ids: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps every memoized object alive while ids are in use

    def _memo(self, obj: Any) -> msgpack.ExtType | None:
        ref = self.ids.get(id(obj))
        if ref is not None:
            return msgpack.ExtType(_REF, msgpack.packb(ref))
        self.ids[id(obj)] = len(self.ids)
        self.keep.append(obj)
        return None

    def pack(self, value: Any) -> bytes:
        return msgpack.packb(value, default=_sentinel, use_bin_type=True)

    def items(self, items: Any) -> bytes:
        """A sequence of items: in one C call when plain, else item by item."""
        seq = items if isinstance(items, list | tuple) else list(items)
        blob = _plain(seq)
        if blob is not None:
            return blob
        return self.pack([self.enc(x) for x in seq])

    def enc(self, x: Any) -> Any:
        out = self._enc(x)
        if type(out) is msgpack.ExtType and len(out.data) >= SEGMENT_MIN:
            self.segments.append(out.data)
            return msgpack.ExtType(
                _SEGMENT, msgpack.packb([out.code, len(self.segments) - 1])
            )
        return out

    def _enc(self, x: Any) -> Any:
        t = type(x)
        if t is int:
            if _INT_MIN <= x <= _UINT_MAX:
                return x
            n = (x.bit_length() + 8) // 8
            return msgpack.ExtType(_BIGINT, x.to_bytes(n, "big", signed=True))
        if t in _SCALARS:
            return x
        if t is tuple:
            if _plain(x) is not None:
                return x
            return msgpack.ExtType(_TUPLE, self.pack([self.enc(i) for i in x]))
        if t is frozenset:
            return msgpack.ExtType(_FROZENSET, self.items(x))
        if t is Fraction:
            return msgpack.ExtType(_FRACTION, self.pack([self.enc(x.numerator),
                                                         self.enc(x.denominator)]))
        if t is np.dtype:
            return msgpack.ExtType(_DTYPE, self._dtype(x).encode())
        if isinstance(x, np.generic):
            return msgpack.ExtType(_NPSCALAR, self.pack([self._dtype(x.dtype), x.tobytes()]))
        const = _CONST_EXTS.get(id(x))
        if const is not None:
            return const
        if t is Paged:
            if self.sink is None or id(x.rows) in self.ids:
                return self._enc(x.rows)
            try:
                paged = x.persist(self.sink)
            except (OverflowError, TypeError, ValueError):  # not plain: an int past 64 bits
                return self._enc(x.rows)
            self._memo(x.rows)
            return msgpack.ExtType(_PAGED, self.pack(paged))
        if t.__name__ in ("function", "builtin_function_or_method"):
            _engine_function(x.__module__, x.__name__)  # refuse now what a read would refuse
            return msgpack.ExtType(_FUNC, self.pack([x.__module__, x.__name__]))
        ref = self._memo(x)
        if ref is not None:
            return ref
        if t is list:
            return msgpack.ExtType(_LIST, self.items(x))
        if t is dict:
            return msgpack.ExtType(_DICT, self._dict(x))
        if t is set:
            return msgpack.ExtType(_SET, self.items(x))
        if t is SortedList:
            return msgpack.ExtType(_SORTEDLIST, self.items(x))
        if t is PagedRows:
            if self.sink is not None:
                return msgpack.ExtType(_PAGED, self.pack(x.persist(self.sink)))
            return msgpack.ExtType(_SORTEDLIST, self.items(x))
        if t is SortedKeyList:
            return msgpack.ExtType(_SORTEDKEYLIST, self.pack([self.enc(x.key),
                                                              self.items(x)]))
        if t is SortedSet:
            return msgpack.ExtType(_SORTEDSET, self.items(x))
        if t is SortedDict:
            return msgpack.ExtType(_SORTEDDICT, self._dict(x))
        if t is defaultdict:
            factory = x.default_factory
            name = getattr(factory, "__name__", None) if factory is not None else None
            if factory is not None and _FACTORIES.get(name or "") is not factory:
                raise UnsafeState(f"cannot save a defaultdict of {factory!r}")
            return msgpack.ExtType(_DEFAULTDICT, self.pack([name, self._dict(x)]))
        if t is np.ndarray:
            if self.sink is not None and x.nbytes >= ARRAY_MIN:
                self._dtype(x.dtype)  # refuse now what a read would refuse
                return msgpack.ExtType(_ARRAYREF, self.pack(self.sink.array(x)))
            arr = np.ascontiguousarray(x)
            return msgpack.ExtType(
                _NDARRAY, self.pack([self._dtype(arr.dtype), list(arr.shape), arr.tobytes()])
            )
        if t is random.Random:
            return msgpack.ExtType(_RANDOM, self.pack(self.enc(x.getstate())))
        module = t.__module__
        if not _in_engine(module):
            raise UnsafeState(f"cannot save a {module}.{t.__qualname__} in an engine state")
        _engine_class(module, t.__qualname__)  # refuse now what a read would refuse
        persist = getattr(t, "__persist__", None)
        if self.sink is not None and persist is not None:
            # an engine class that keeps itself in segments: its reference (plain data)
            ref = persist(x, self.sink)
            if ref is not None:
                return msgpack.ExtType(_SEGOBJ, self.pack([module, t.__qualname__, ref]))
        state = self.pack(self.enc(x.__getstate__()))
        return msgpack.ExtType(_OBJ, self.pack([module, t.__qualname__, state]))

    def _dict(self, d: Any) -> bytes:
        keys, values = list(d.keys()), list(d.values())
        return self.pack([self.items(keys), self.items(values)])

    @staticmethod
    def _dtype(dt: np.dtype) -> str:
        if dt.hasobject or dt.fields is not None:
            raise UnsafeState(f"cannot save a numpy array of dtype {dt}")
        return dt.str


class _Reader:
    def __init__(self, segments: list[bytes | None], source: SegmentSource | None = None):
        self.source = source
        self.segments = segments
        self.table: list[Any] = []

    def items(self, data: bytes) -> Any:
        """What ``_Writer.items`` wrote: a tuple of the items. (Rows the engine shared
        between structures come back as equal copies: interning them by equality would
        merge ``(1,)`` and ``(1.0,)``.)"""
        return self.unpack(data)

    def unpack(self, data: bytes | memoryview) -> Any:
        return msgpack.unpackb(
            data, ext_hook=self.ext, use_list=False, raw=False, strict_map_key=False
        )

    def _register(self, obj: Any) -> Any:
        self.table.append(obj)
        return obj

    def ext(self, code: int, data: bytes) -> Any:
        if code == _CONST:  # the most frequent: seek sentinels in sensitivity intervals
            return _CONSTS[data.decode()]
        if code == _REF:
            return self.table[msgpack.unpackb(data)]
        if code == _SEGMENT:
            inner, index = msgpack.unpackb(data)
            segment = self.segments[index]
            if segment is None or inner in (_SEGMENT, _REF):
                raise UnsafeState(f"segment {index} read twice, or an extension {inner}")
            self.segments[index] = None  # read once: its memory goes with it
            return self.ext(inner, segment)
        if code == _BIGINT:
            return int.from_bytes(data, "big", signed=True)
        if code == _TUPLE:
            return tuple(self.unpack(data))
        if code == _FROZENSET:
            return frozenset(self.items(data))
        if code == _FRACTION:
            n, d = self.unpack(data)
            return Fraction(n, d)
        if code == _DTYPE:
            return _dtype(data.decode())
        if code == _NPSCALAR:
            dt, raw = self.unpack(data)
            return np.frombuffer(raw, _dtype(dt), 1)[0]
        if code == _FUNC:
            module, name = self.unpack(data)
            return _engine_function(module, name)
        if code == _LIST:
            out: list[Any] = self._register([])
            out.extend(self.items(data))
            return out
        if code in (_DICT, _SORTEDDICT):
            d = self._register({} if code == _DICT else SortedDict())
            keys, values = self.unpack(data)
            d.update(zip(self.items(keys), self.items(values), strict=True))
            return d
        if code == _DEFAULTDICT:
            slot = len(self.table)
            dd: defaultdict[Any, Any] = self._register(defaultdict())
            name, body = self.unpack(data)
            if name is not None:
                if name not in _FACTORIES:
                    raise UnsafeState(f"a saved state may not make a defaultdict of {name}")
                dd.default_factory = _FACTORIES[name]
            keys, values = self.unpack(body)
            dd.update(zip(self.items(keys), self.items(values), strict=True))
            assert self.table[slot] is dd
            return dd
        if code == _SET:
            s: set[Any] = self._register(set())
            s.update(self.items(data))
            return s
        if code == _SORTEDLIST:
            sl = self._register(SortedList())
            sl.update(self.items(data))
            return sl
        if code == _SORTEDSET:
            ss = self._register(SortedSet())
            ss.update(self.items(data))
            return ss
        if code == _SORTEDKEYLIST:
            slot = len(self.table)
            self._register(None)
            key, items = self.unpack(data)
            skl = SortedKeyList(self.items(items), key=key)
            self.table[slot] = skl
            return skl
        if code == _NDARRAY:
            slot = len(self.table)
            self._register(None)
            dt, shape, raw = self.unpack(data)
            arr = np.frombuffer(raw, _dtype(dt)).reshape(shape).copy()
            self.table[slot] = arr
            return arr
        if code == _SEGOBJ:
            if self.source is None:
                raise UnsafeState("this state keeps segments apart: open it from its store")
            slot = len(self.table)
            self._register(None)
            module, qualname, ref = self.unpack(data)
            cls = _engine_class(module, qualname)
            restore = getattr(cls, "__restore__", None)
            if restore is None:
                raise UnsafeState(f"{module}.{qualname} is not kept in segments")
            obj = restore(self.source, ref)
            self.table[slot] = obj
            return obj
        if code in (_PAGED, _ARRAYREF):
            if self.source is None:
                raise UnsafeState("this state keeps segments apart: open it from its store")
            slot = len(self.table)
            self._register(None)
            ref = self.unpack(data)
            got: Any = (PagedRows.open(self.source, ref) if code == _PAGED
                        else self.source.open_array(ref))
            self.table[slot] = got
            return got
        if code == _RANDOM:
            r = self._register(random.Random())
            r.setstate(_lists_to_tuples(self.unpack(data)))
            return r
        if code == _OBJ:
            slot = len(self.table)
            self._register(None)
            module, qualname, state = self.unpack(data)  # the state is still bytes here
            cls = _engine_class(module, qualname)
            obj = cls.__new__(cls)
            self.table[slot] = obj  # before the state: a cycle back to obj finds it
            _set_state(obj, self.unpack(state))
            return obj
        raise UnsafeState(f"unknown extension {code} in a saved state")


def _lists_to_tuples(x: Any) -> Any:
    return tuple(_lists_to_tuples(i) for i in x) if isinstance(x, list | tuple) else x


def _dtype(text: str) -> np.dtype:
    dt = np.dtype(text)
    if dt.hasobject or dt.fields is not None:
        raise UnsafeState(f"a saved state may not hold a numpy array of dtype {text}")
    return dt


def _set_state(obj: Any, state: Any) -> None:
    """What ``pickle`` does with an object's state: ``__setstate__`` when the class defines
    one, else the instance dict and slots set directly (frozen dataclasses included)."""
    setter = getattr(type(obj), "__setstate__", None)
    if setter is not None:
        setter(obj, state)
        return
    if state is None:
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        obj.__dict__.update(state)
    if slots:
        for name, value in slots.items():
            object.__setattr__(obj, name, value)


_CONSTS = CONSTS
_CONST_EXTS = CONST_EXTS


def dumps(value: Any, sink: SegmentSink | None = None) -> bytes:
    """``value`` (an engine state) as bytes; raises ``UnsafeState`` for anything an engine
    state is not made of. With a ``sink``, large sorted containers (``Paged``) and large
    arrays go to segments of their own through it (only what changed since they were
    opened), and the bytes returned name them."""
    writer = _Writer(sink)
    tree = writer.pack(writer.enc(value))
    return msgpack.packb([tree, *writer.segments], use_bin_type=True)


def loads(blob: bytes | memoryview, source: SegmentSource | None = None) -> Any:
    """The state ``dumps`` wrote (reading the segments it names from ``source``). Never
    runs code named by the bytes: raises ``UnsafeState`` (or a MessagePack or value
    error) for anything else."""
    parts = msgpack.unpackb(blob, raw=False)
    if not isinstance(parts, list) or not parts or not all(type(p) is bytes for p in parts):
        raise UnsafeState("not an engine state: a list of byte strings expected")
    tree, *segments = parts
    return _Reader(list(segments), source).unpack(tree)
