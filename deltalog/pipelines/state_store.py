"""The persisted state of one stratum's maintenance between runs: the engine (relations,
support counts, sensitivity indices, DBSP state) plus the input versions it stands for.

One folder per (pipeline, stratum) under ``<warehouse>/_deltalog_state/`` or a state root
of its own (``state_dir``): immutable segment files and a manifest, ``CURRENT``.

- **Segments** are written once and never changed: the engine's root (its object graph as
  ``deltalog.engine.state_codec`` writes it, small when the large parts are segments of their own),
  sorted runs of relations and the rows changed since (``deltalog.engine.segments``), numpy arrays
  and the pages of them changed since. A run opens the state in O(1) in the data: it reads
  the manifest and the root, maps the rest, and the engine reads the pages it touches.
  Saving writes the rows and pages the run changed, plus the root; when the changes behind
  a run or an array pass a share of it they are merged into a new one (compaction).
- **The manifest** names the live segments (with their sizes, and checksums for those
  read whole), the run number and the versions; it is replaced atomically (temp file,
  fsync, rename, fsync of the folder) after the segments are fsynced, so a crash leaves
  the old state or the new one. Segments no manifest names are removed after a commit.
- **Checks**: the manifest's SHA-256 and every segment's size when the state is opened;
  the CRC-32 of every segment when read (roots, deltas, sorted runs up to
  ``CHECKED_MAX``), of every array when mapped
  (the numba kernels read arrays anywhere, so an array is checked whole: bandwidth-bound,
  about 0.4 ms per MB), and of every page of a sorted run when the page is decoded. An
  array or sorted run checked whole once carries a stamp (the file's inode and change
  time) and is not checked whole again while its file keeps it, except every
  ``RECHECK_RUNS`` runs: any write to a file changes its change time. A
  failure at open is no state (the caller rebuilds from the tables and says so); a page
  that fails later raises ``deltalog.engine.segments.CorruptSegment``, which the run turns into a
  rebuild before anything is committed, or into a dropped state when it comes while saving.
- Nothing in the folder is executed: the manifest is JSON, the rest is read by the engine
  as data.

Changed array pages are found through ``/proc/self/pagemap`` (Linux): an array is mapped
copy-on-write, and the pages written since are the mapping's private ones. Where that file
cannot be read, a changed-or-not array is written whole, and ``arrays_written_whole``
in the save's counters says so.

A per-stratum lock file serializes materializations of one stratum on this machine.
"""

import contextlib
import errno
import fcntl
import hashlib
import json
import mmap
import os
import re
import shutil
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deltalog.engine.errors import CONCURRENT, STATE_UNWRITABLE, DataError, NotSupportedError
from deltalog.engine.segments import SegmentSink
from deltalog.pipelines.faults import fault

STATE_DIR = "_deltalog_state"
MAGIC = b"deltalog-store/1\n"  # the manifest's format; any other start is not a state
CURRENT = "CURRENT"
SEG = ".seg"
# Sorted runs (which check themselves a page at a time) up to this size are also checked
# whole when opened; every other segment always is.
CHECKED_MAX = 8 << 20
PAGE = mmap.PAGESIZE
# Compaction of an array: a new base when its changed pages pass this share of it, or
# when this many deltas are chained behind it.
ARRAY_SHARE = 0.25
ARRAY_CHAIN = 32
# Runs remembered in the manifest (what each consumed, for lineage over history).
HISTORY_MAX = 256
# A large segment checked whole once is not checked again while its file is unchanged
# (same inode and change time), except once every this many runs (spread by name).
RECHECK_RUNS = 64
# A stamp is recorded only for a file last changed this long before it was checked, so
# that a write within the file system's timestamp granularity still tells.
STAMP_AGE_NS = 2_000_000_000


class StoreError(ValueError):
    """The store's files are not what its manifest says (missing, truncated, corrupted)."""


@dataclass
class StratumState:
    """What a stratum's last completed run left: the engine at ``input_versions``.

    ``seq`` counts completed runs; ``written[pred]`` is the application transaction version
    (a ``seq``) of the last commit to ``pred``'s table (None: never written by a run) and
    ``table_versions[pred]`` the table version right after it. ``table_ids`` are the Delta
    table ids of the inputs and of the stratum's own tables: a table removed and created
    again at the same path (or a state copied from another warehouse) has another id.
    ``history`` holds the last ``HISTORY_MAX`` runs as ``[seq, edb_versions,
    input_versions, table_versions]``: what a run consumed is recorded in the tables only
    when it committed to one of them. ``copies`` holds, per input table, the rows its
    version held more than once (a Delta table is a bag) with their numbers of copies, or
    None when not known (the change reader then looks deleted rows up in the table).
    ``root`` names the engine's root segment and
    ``segments`` every live segment (name -> [size, CRC-32, paged]) of the store at
    ``folder``."""

    digest: str
    seq: int
    input_versions: dict[str, int]
    edb_versions: dict[str, int]
    written: dict[str, int | None]
    table_versions: dict[str, int]
    table_ids: dict[str, str] = field(default_factory=dict)
    history: list[list[Any]] = field(default_factory=list, repr=False)
    copies: dict[str, dict[tuple[Any, ...], int] | None] = field(default_factory=dict,
                                                                  repr=False)
    root: str = ""
    segments: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    folder: Path | None = field(default=None, repr=False)
    # what a partitioned stratum keeps beside (``deltalog.pipelines.partitions``): the
    # driver's partitioning and the run it started; a partition's saved output segment
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def header(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "seq": self.seq,
            "input_versions": self.input_versions,
            "edb_versions": self.edb_versions,
            "written": self.written,
            "table_versions": self.table_versions,
            "table_ids": self.table_ids,
            "history": self.history[-HISTORY_MAX:],
            "copies": {p: None if rows is None else [[*row, n] for row, n in rows.items()]
                       for p, rows in self.copies.items()},
            "extra": self.extra,
        }

    def open(self) -> "Reader":
        """A reader of this state's segments (mapped on demand)."""
        if self.folder is None:
            raise StoreError("a state that was not read from a store")
        return Reader(self.folder, self.segments, self.seq)


def state_dir(root: str | Path, pipeline: str, state_root: str | Path | None = None) -> Path:
    """The folder of ``pipeline``'s saved states: under ``state_root`` when given (a local
    disk apart from the warehouse), in a folder of the warehouse's own
    (``warehouse_key``: projects sharing a state root keep apart states and locks for
    pipelines of one name), else under ``<warehouse root>/_deltalog_state``."""
    if state_root is None and "://" in str(root) and not str(root).startswith("file://"):
        raise NotSupportedError(
            f"the warehouse {root} is on object storage and the engine state (and its lock) "
            "needs a local folder: set the warehouse resource's state_root or "
            "$DELTALOG_STATE", str(root))
    if state_root is None:
        return Path(root) / STATE_DIR / pipeline
    return Path(state_root) / warehouse_key(root) / pipeline


def warehouse_key(root: str | Path) -> str:
    """A folder name that tells warehouses apart: the root's last parts, readable, and a
    hash of the whole (a local root taken absolute, so a relative and an absolute path to
    one warehouse are one key)."""
    text = str(root).rstrip("/")
    if "://" not in text or text.startswith("file://"):
        text = os.path.abspath(text.removeprefix("file://"))
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[-48:] or "warehouse"
    return f"{name}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:10]}"


def state_path(
    root: str | Path, pipeline: str, stratum: int, state_root: str | Path | None = None
) -> Path:
    """The store folder of one stratum (its lock is the file beside it, ``.lock``)."""
    return state_dir(root, pipeline, state_root) / f"stratum-{stratum}"


def older_format(path: Path) -> Path | None:
    """The whole-state file an earlier version of deltalog kept for this stratum, if any."""
    old = path.with_name(path.name + ".state")
    return old if old.exists() else None


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_state(path: Path) -> StratumState | None:
    """The saved state, or None when there is none, or when the manifest is not one this
    code wrote intact (another format, a wrong checksum, a segment missing or of another
    size); the caller then rebuilds from the tables. Reads the manifest only."""
    try:
        blob = (path / CURRENT).read_bytes()
    except OSError:  # none, or not a file (a folder in its place): rebuilt from the tables
        return None
    head = len(MAGIC) + 32
    if len(blob) < head or not blob.startswith(MAGIC):
        return None
    body = blob[head:]
    if hashlib.sha256(body).digest() != blob[len(MAGIC) : head]:
        return None
    try:
        fields = json.loads(body.decode("utf-8"))
        h = fields["header"]
        state = StratumState(
            digest=str(h["digest"]),
            seq=int(h["seq"]),
            input_versions={str(k): int(v) for k, v in h["input_versions"].items()},
            edb_versions={str(k): int(v) for k, v in h["edb_versions"].items()},
            written={str(k): None if v is None else int(v) for k, v in h["written"].items()},
            table_versions={str(k): int(v) for k, v in h["table_versions"].items()},
            table_ids={str(k): str(v) for k, v in h["table_ids"].items()},
            history=[list(e) for e in h.get("history", [])],
            copies={str(p): None if rows is None else {tuple(r[:-1]): int(r[-1]) for r in rows}
                    for p, rows in h.get("copies", {}).items()},
            root=str(fields["root"]),
            segments={str(k): [int(v[0]), int(v[1]), bool(v[2]), _stamp(v[3:])]
                      for k, v in fields["segments"].items()},
            folder=path,
            extra=dict(h.get("extra", {})),
        )
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None
    for name, (size, *_) in state.segments.items():
        try:
            if (path / name).stat().st_size != size:
                return None
        except OSError:
            return None
    return state


def _stamp(rest: list[Any]) -> list[int] | None:
    """A segment's check stamp from its manifest entry: [inode, change time in ns] of the
    file when it was last checked whole (None: never, or an entry without one)."""
    if not rest or not isinstance(rest[0], list) or len(rest[0]) != 2:
        return None
    return [int(rest[0][0]), int(rest[0][1])]


class Reader:
    """The segments of one saved state, for ``deltalog.engine.state_codec.loads``: ``read`` maps a
    segment read-only (checked against its CRC-32 when it is small enough to read whole);
    ``open_array`` maps an array's base copy-on-write and lays its changed pages over it.

    A large segment (an array, a sorted run) whose file has the inode and change time it
    had when a run last checked it whole is not checked again (any write to the file, a
    copy or a restore changes them); every ``RECHECK_RUNS`` runs it is, whatever its stamp
    (silent media errors that no write explains). Smaller segments (the root, deltas) are
    always checked."""

    def __init__(self, folder: Path, segments: dict[str, list[Any]], seq: int = 0):
        self.folder = folder
        self.segments = segments
        self.seq = seq
        self.stamps: dict[str, list[int]] = {}  # segments checked whole by this reader
        self.maps: dict[str, mmap.mmap] = {}
        # id(array) -> (the array, its reference, its mapping, page -> bytes laid over it)
        self.arrays: dict[int, tuple[np.ndarray, list[Any], mmap.mmap, dict[int, bytes]]] = {}
        self.bytes_read = 0  # segments read whole (checked, or arrays laid over)
        self.unchecked: set[str] = set()  # large sorted runs, read a page at a time

    def bytes_touched(self) -> int:
        """Bytes of the state this reader has read so far: the segments read whole, and of
        the segments mapped and read a page at a time (large sorted runs, arrays checked
        by an earlier run), the pages this process has mapped in (from
        ``/proc/self/pagemap``: the pages touched, with the kernel's fault-around). Where
        that cannot be read, those segments count whole."""
        touched = self.bytes_read
        mapped = {name: mm for name, mm in self.maps.items() if name in self.unchecked}
        for _, ref, mm, _ in self.arrays.values():
            if ref[2] in self.unchecked:
                mapped[ref[2]] = mm
        for name, mm in mapped.items():
            raw = np.frombuffer(mm, dtype=np.uint8)
            entries = _pagemap(raw.ctypes.data, len(raw)) if len(raw) else None
            if entries is None:
                touched += self.segments[name][0]
            else:
                present = (entries >> np.uint64(63)) & np.uint64(1)
                touched += int(present.sum()) * PAGE
        return touched

    def _map(self, name: str, access: int = mmap.ACCESS_READ) -> tuple[mmap.mmap, bool]:
        """The segment mapped, and whether it must be checked whole (see the class)."""
        meta = self.segments.get(name)
        if meta is None:
            raise StoreError(f"segment {name} is not in the manifest")
        try:
            with open(self.folder / name, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_size != meta[0]:
                    raise StoreError(
                        f"segment {name} has {st.st_size} bytes, the manifest {meta[0]}"
                    )
                stamp = [st.st_ino, st.st_ctime_ns]
                due = (zlib.crc32(name.encode()) + self.seq) % RECHECK_RUNS == 0
                check = due or meta[3] != stamp
                if check and time.time_ns() - st.st_ctime_ns >= STAMP_AGE_NS:
                    self.stamps[name] = stamp  # recorded by the next save once it passed
                if st.st_size == 0:
                    return mmap.mmap(-1, 1), check
                return mmap.mmap(f.fileno(), st.st_size, access=access), check
        except FileNotFoundError:
            raise StoreError(f"segment {name} is missing") from None
        except OSError as err:  # a folder in its place, no permission to read it
            raise StoreError(f"segment {name} cannot be read ({err.strerror or err})") from None

    def read(self, name: str) -> memoryview:
        if self.segments.get(name, [None])[0] == 0:
            return memoryview(b"")
        mm = self.maps.get(name)
        if mm is None:
            mm, check = self._map(name)
            self.maps[name] = mm
            size, crc, paged, _ = self.segments[name]
            if not paged or (size <= CHECKED_MAX and check):
                self.bytes_read += size
                if zlib.crc32(mm) != crc:
                    raise StoreError(f"segment {name} fails its checksum")
            else:  # its pages check themselves when decoded
                self.unchecked.add(name)
        return memoryview(mm)[: self.segments[name][0]]

    def open_array(self, ref: list[Any]) -> np.ndarray:
        dtype, shape, base, deltas = ref
        meta = self.segments.get(base)
        if meta is not None and meta[0] == 0:  # an array of no bytes (a dimension of 0)
            if meta[1] != zlib.crc32(b"") or deltas or int(np.prod(shape)) != 0:
                raise StoreError(f"array segment {base} does not match its manifest entry")
            return np.zeros(shape, dtype=np.dtype(dtype))
        mm, check = self._map(base, mmap.ACCESS_COPY)
        if check:
            self.bytes_read += len(mm)
            if zlib.crc32(mm) != self.segments[base][1]:
                raise StoreError(f"array segment {base} fails its checksum")
        else:  # checked whole by an earlier run, unchanged since: what the kernels touch
            self.unchecked.add(base)
        count = int(np.prod(shape)) if shape else 1
        arr = np.frombuffer(mm, dtype=np.dtype(dtype), count=count).reshape(shape)
        raw = np.frombuffer(mm, dtype=np.uint8)
        laid: dict[int, bytes] = {}
        for name in deltas:
            for page, data in _delta_pages(self.read(name)):
                if page * PAGE + len(data) > len(raw):
                    raise StoreError(f"delta {name} writes past its array")
                raw[page * PAGE : page * PAGE + len(data)] = np.frombuffer(data, np.uint8)
                laid[page] = data
        self.arrays[id(arr)] = (arr, ref, mm, laid)
        return arr


def _delta_pages(buf: memoryview) -> Iterator[tuple[int, bytes]]:
    """The (page, bytes) pairs of an array delta segment: a count, the page numbers
    (int64) and the pages (the last one of the array may be short)."""
    k = int.from_bytes(buf[:8], "little")
    pages = np.frombuffer(buf, dtype=np.int64, count=k, offset=8)
    lengths = np.frombuffer(buf, dtype=np.int64, count=k, offset=8 + 8 * k)
    at = 8 + 16 * k
    for page, n in zip(pages.tolist(), lengths.tolist(), strict=True):
        yield page, bytes(buf[at : at + n])
        at += n
    if at != len(buf):
        raise StoreError("an array delta whose pages do not add up to its size")


def _pagemap(addr: int, length: int) -> np.ndarray | None:
    """The ``/proc/self/pagemap`` entries of the pages of the mapping at ``addr`` (8 bytes
    per page of the mapping, not the pages); None when that cannot be read."""
    first, last = addr // PAGE, (addr + length - 1) // PAGE
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(first * 8)
            entries = np.frombuffer(f.read((last - first + 1) * 8), dtype=np.uint64)
    except OSError:
        return None
    return entries if len(entries) == last - first + 1 else None


def dirty_pages(addr: int, length: int) -> np.ndarray | None:
    """The pages of the copy-on-write mapping at ``addr`` written since it was mapped (the
    private ones, present or swapped out); None when ``/proc/self/pagemap`` cannot be
    read."""
    entries = _pagemap(addr, length)
    if entries is None:
        return None
    present = (entries >> np.uint64(63)) & np.uint64(1)
    swapped = (entries >> np.uint64(62)) & np.uint64(1)
    file_page = (entries >> np.uint64(61)) & np.uint64(1)
    private = ((present == 1) & (file_page == 0)) | (swapped == 1)
    return np.nonzero(private)[0]


class Writer(SegmentSink):
    """The segments of one save, for ``deltalog.engine.state_codec.dumps``: new ones are written
    and fsynced in the store's folder under names no earlier save used; segments of the
    opened state that are still current are kept (``keep``)."""

    def __init__(self, folder: Path, seq: int, opened: Reader | None, stratum: int = -1):
        self.folder = folder
        self.stratum = stratum  # for the crash tests' fault points
        self.prefix = f"s{seq:08d}-{uuid.uuid4().hex[:8]}-"
        self.opened = opened
        self.live: dict[str, list[Any]] = {}
        self.count = 0
        self.bytes_written = 0
        self.arrays_written_whole = 0

    def write(self, parts: list[bytes], paged: bool = False) -> str:
        name = f"{self.prefix}{self.count:05d}{SEG}"
        self.count += 1
        size = 0
        crc = 0
        with open(self.folder / name, "wb") as f:
            for part in parts:
                f.write(part)
                size += len(part)
                crc = zlib.crc32(part, crc)
            f.flush()
            os.fsync(f.fileno())
            if paged and self.opened is not None:
                fault("mid_compaction", self.stratum)
        # Checked whole by the first run that opens it (a stamp taken now could match a
        # file damaged within the file system's timestamp granularity).
        self.live[name] = [size, crc, paged, None]
        fault("mid_state", self.stratum)
        self.bytes_written += size
        return name

    def keep(self, names: list[str]) -> None:
        segments = self.opened.segments if self.opened is not None else {}
        for name in names:
            if name not in segments:
                raise StoreError(f"segment {name} is not one of the opened state")
            size, crc, paged, stamp = segments[name]
            if self.opened is not None and name in self.opened.stamps:
                stamp = self.opened.stamps[name]  # checked whole by this run
            self.live[name] = [size, crc, paged, stamp]

    def _base(self, arr: np.ndarray, compaction: bool = False) -> list[Any]:
        if compaction:
            fault("mid_compaction", self.stratum)
        data = np.ascontiguousarray(arr)
        name = self.write([data.tobytes()])  # checked when mapped (see the module)
        return [data.dtype.str, list(data.shape), name, []]

    def array(self, arr: np.ndarray) -> list[Any]:
        got = self.opened.arrays.get(id(arr)) if self.opened is not None else None
        if got is None or got[0] is not arr:
            return self._base(arr)
        _, ref, mm, laid = got
        dtype, shape, base, deltas = ref
        raw = np.frombuffer(mm, dtype=np.uint8)
        dirty = dirty_pages(raw.ctypes.data, len(raw))
        if dirty is None:
            self.arrays_written_whole += 1
            return self._base(arr)
        changed: list[tuple[int, bytes]] = []
        with open(self.folder / base, "rb") as f:  # written pages may hold what they held
            for page in dirty.tolist():
                data = raw[page * PAGE : (page + 1) * PAGE].tobytes()
                before = laid.get(page)
                if before is None:
                    before = os.pread(f.fileno(), len(data), page * PAGE)
                if before != data:
                    changed.append((page, data))
        if not changed:
            self.keep([base, *deltas])
            return list(ref)
        behind = sum(self.opened.segments[d][0] for d in deltas)  # type: ignore[union-attr]
        if len(deltas) >= ARRAY_CHAIN or behind + len(changed) * PAGE > ARRAY_SHARE * len(raw):
            return self._base(arr, compaction=True)
        pages = np.array([p for p, _ in changed], dtype=np.int64)
        lengths = np.array([len(d) for _, d in changed], dtype=np.int64)
        name = self.write([len(changed).to_bytes(8, "little"), pages.tobytes(),
                           lengths.tobytes(), *(d for _, d in changed)])
        self.keep([base, *deltas])
        return [dtype, shape, base, [*deltas, name]]


def save_state(
    path: Path,
    state: StratumState,
    dump: Callable[[Writer], bytes] | None = None,
    opened: Reader | None = None,
    stratum: int = -1,
) -> dict[str, int]:
    """Commit ``state`` to the store at ``path``: with ``dump`` (which writes the engine
    through the ``Writer`` it is given and returns the root's bytes), a new engine; without,
    the header only (the engine of ``state`` kept). ``opened`` is the reader the engine
    was opened from (its unchanged segments are kept, not copied). Returns counters:
    ``bytes_written`` (segments and manifest), ``segments``, ``arrays_written_whole``.
    Atomic: the manifest is replaced last; a crash before leaves the previous state.

    A state folder that is a file, or a manifest or segment name that is a folder, is
    damage no state can be read from: removed first. Raises ``DataError`` DL314 when the
    folder cannot be written (permissions, a full disk)."""
    try:
        return _save(path, state, dump, opened, stratum)
    except OSError as err:
        raise DataError(
            f"the stratum's state cannot be saved ({err.strerror or err}: "
            f"{err.filename or path}); the tables are committed, and the next run goes on "
            "from the state saved before (or rebuilds it from the tables) once the folder "
            "can be written",
            str(path),
            STATE_UNWRITABLE,
        ) from None


def _save(
    path: Path,
    state: StratumState,
    dump: Callable[[Writer], bytes] | None,
    opened: Reader | None,
    stratum: int,
) -> dict[str, int]:
    if path.is_file() or (path.is_symlink() and not path.exists()):
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    if (path / CURRENT).is_dir():
        shutil.rmtree(path / CURRENT)
    writer = Writer(path, state.seq, opened, stratum)
    if dump is not None:
        root = dump(writer)
        state.root = writer.write([root])
        segments = writer.live
    else:
        segments = dict(state.segments)
    body = json.dumps(
        {"header": state.header(), "root": state.root, "segments": segments},
        sort_keys=True,
    ).encode("utf-8")
    blob = MAGIC + hashlib.sha256(body).digest() + body
    tmp = path / f".{CURRENT}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(path)  # the segments' names are durable before the manifest names them
    os.replace(tmp, path / CURRENT)
    _fsync_dir(path)
    state.segments, state.folder = segments, path
    _collect(path, segments)
    old = older_format(path)
    if old is not None:
        old.unlink(missing_ok=True)
    return {
        "bytes_written": writer.bytes_written + len(blob),
        "segments": len(segments),
        "arrays_written_whole": writer.arrays_written_whole,
    }


def _collect(path: Path, live: dict[str, list[Any]]) -> None:
    """Remove the segments (and temp files) the manifest does not name: a replaced
    state's, or those of a save that crashed before its manifest."""
    for entry in path.iterdir():
        name = entry.name
        if name == CURRENT or name in live:
            continue
        if name.endswith(SEG) or name.startswith(f".{CURRENT}."):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
                continue
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()


def drop_state(path: Path) -> bool:
    """Remove a saved state (and a state in the older whole-file format); True when there
    was one."""
    had = False
    old = older_format(path)
    if old is not None:
        old.unlink(missing_ok=True)
        had = True
    current = path / CURRENT
    if current.is_dir():
        shutil.rmtree(current)
        had = True
    elif current.exists():
        current.unlink()
        had = True
    if path.is_file():  # a file in the folder's place
        path.unlink()
        had = True
    if path.is_dir():
        _collect(path, {})
        with contextlib.suppress(OSError):
            path.rmdir()
    return had


def state_exists(path: Path) -> bool:
    """Whether anything is saved at ``path`` (readable or not; a file in the folder's
    place is a damaged state)."""
    return (path / CURRENT).exists() or path.is_file() or older_format(path) is not None


@contextlib.contextmanager
def stratum_lock(path: Path, wait_seconds: float) -> Iterator[None]:
    """Hold the lock of the stratum whose state is at ``path`` (an ``flock``, released by
    the kernel when the process dies, so a crash never leaves it held). Waits up to
    ``wait_seconds`` for another holder, then raises ``DataError`` DL305."""
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise DataError(
            f"the stratum's lock file {lock} cannot be opened ({err.strerror or err}): it "
            "must be a file this user can write (remove what is in its place)",
            str(path),
            STATE_UNWRITABLE,
        ) from None
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise DataError(
                        "another materialization of this stratum is running (lock "
                        f"{lock} held for more than {wait_seconds:g} s); run again when "
                        "it has finished",
                        str(path),
                        CONCURRENT,
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
