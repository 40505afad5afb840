"""The persisted state of one stratum's maintenance between runs: the engine (relations,
support counts, sensitivity indices, DBSP state) plus the input versions it stands for.

One file per (pipeline, stratum) under ``<warehouse>/_deltalog_state/`` or a state root of
its own (``state_dir``), replaced atomically
(temp file, fsync, rename, fsync of the folder), so a crash leaves the old state or the new
one, never a torn file; a checksum over the file tells a corrupted one, which is no state
(the next run rebuilds it from the tables). The header is JSON; the engine's bytes are
read by the engine without running code from the file (``engine.state_codec``).
A per-stratum lock file serializes materializations of one stratum on this machine.
"""

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import CONCURRENT, DataError, NotSupportedError

STATE_DIR = "_deltalog_state"
MAGIC = b"deltalog-state/3\n"  # the file format; any other start is not a state


@dataclass
class StratumState:
    """What a stratum's last completed run left: the engine at ``input_versions``.

    ``seq`` counts completed runs; ``written[pred]`` is the application transaction version
    (a ``seq``) of the last commit to ``pred``'s table (None: never written by a run) and
    ``table_versions[pred]`` the table version right after it. ``table_ids`` are the Delta
    table ids of the inputs and of the stratum's own tables: a table removed and created
    again at the same path (or a state copied from another warehouse) has another id."""

    digest: str
    seq: int
    input_versions: dict[str, int]
    edb_versions: dict[str, int]
    written: dict[str, int | None]
    table_versions: dict[str, int]
    engine: bytes = field(repr=False)
    table_ids: dict[str, str] = field(default_factory=dict)


def state_dir(root: str | Path, pipeline: str, state_root: str | Path | None = None) -> Path:
    """The folder of ``pipeline``'s saved states: under ``state_root`` when given (a local
    disk apart from the warehouse), else under ``<warehouse root>/_deltalog_state``."""
    if state_root is None and "://" in str(root) and not str(root).startswith("file://"):
        raise NotSupportedError(
            f"the warehouse {root} is on object storage and the engine state (and its lock) "
            "needs a local folder: set the warehouse resource's state_root or "
            "$DELTALOG_STATE", str(root))
    base = Path(state_root) if state_root is not None else Path(root) / STATE_DIR
    return base / pipeline


def state_path(
    root: str | Path, pipeline: str, stratum: int, state_root: str | Path | None = None
) -> Path:
    return state_dir(root, pipeline, state_root) / f"stratum-{stratum}.state"


def load_state(path: Path) -> StratumState | None:
    """The saved state, or None when there is none, or when the file is not one this code
    wrote intact (another format, a wrong checksum: torn or corrupted bytes); the caller
    then rebuilds from the tables. Nothing in the file is executed: the header is JSON,
    the engine bytes are read later by ``IncrementalEngine.loads``."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    head = len(MAGIC) + 32 + 4
    if len(blob) < head or not blob.startswith(MAGIC):
        return None
    body = blob[len(MAGIC) + 32 :]
    if hashlib.sha256(body).digest() != blob[len(MAGIC) : len(MAGIC) + 32]:
        return None
    size = int.from_bytes(body[:4], "big")
    try:
        fields = json.loads(body[4 : 4 + size].decode("utf-8"))
        return StratumState(
            digest=str(fields["digest"]),
            seq=int(fields["seq"]),
            input_versions={str(k): int(v) for k, v in fields["input_versions"].items()},
            edb_versions={str(k): int(v) for k, v in fields["edb_versions"].items()},
            written={
                str(k): None if v is None else int(v) for k, v in fields["written"].items()
            },
            table_versions={str(k): int(v) for k, v in fields["table_versions"].items()},
            engine=body[4 + size :],
            table_ids={str(k): str(v) for k, v in fields["table_ids"].items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def save_state(path: Path, state: StratumState) -> int:
    """Write ``state`` atomically; returns its size in bytes. The file: ``MAGIC``, the
    SHA-256 of the rest, the length of a JSON header (4 bytes, big-endian), the header (run
    number, versions, digest) and the engine's bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = {k: v for k, v in vars(state).items() if k != "engine"}
    header = json.dumps(fields, sort_keys=True).encode("utf-8")
    body = len(header).to_bytes(4, "big") + header + state.engine
    blob = MAGIC + hashlib.sha256(body).digest() + body
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(blob)


def drop_state(path: Path) -> bool:
    """Remove a saved state; True when there was one."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


@contextlib.contextmanager
def stratum_lock(path: Path, wait_seconds: float) -> Iterator[None]:
    """Hold the lock of the stratum whose state is at ``path`` (an ``flock``, released by
    the kernel when the process dies, so a crash never leaves it held). Waits up to
    ``wait_seconds`` for another holder, then raises ``DataError`` DL305."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
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
