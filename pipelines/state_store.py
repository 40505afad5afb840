"""The persisted state of one stratum's maintenance between runs: the engine (relations,
support counts, sensitivity indices, DBSP state) plus the input versions it stands for.

One file per (pipeline, stratum) under ``<warehouse>/_deltalog_state/`` or a state root of
its own (``state_dir``), replaced atomically
(temp file, fsync, rename, fsync of the folder), so a crash leaves the old state or the new
one, never a torn file. The state is pickle: trusted input only (it lives in the warehouse).
A per-stratum lock file serializes materializations of one stratum on this machine.
"""

import contextlib
import errno
import fcntl
import os
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import DataError

STATE_DIR = "_deltalog_state"
STATE_FORMAT = 1
CONCURRENT = "DL305"  # another materialization of the same stratum holds the lock


@dataclass
class StratumState:
    """What a stratum's last completed run left: the engine at ``input_versions``.

    ``seq`` counts completed runs; ``written[pred]`` is the application transaction version
    (a ``seq``) of the last commit to ``pred``'s table (None: never written by a run) and
    ``table_versions[pred]`` the table version right after it."""

    digest: str
    seq: int
    input_versions: dict[str, int]
    edb_versions: dict[str, int]
    written: dict[str, int | None]
    table_versions: dict[str, int]
    engine: bytes = field(repr=False)


def state_dir(root: str | Path, pipeline: str, state_root: str | Path | None = None) -> Path:
    """The folder of ``pipeline``'s saved states: under ``state_root`` when given (a local
    disk apart from the warehouse), else under ``<warehouse root>/_deltalog_state``."""
    base = Path(state_root) if state_root is not None else Path(root) / STATE_DIR
    return base / pipeline


def state_path(
    root: str | Path, pipeline: str, stratum: int, state_root: str | Path | None = None
) -> Path:
    return state_dir(root, pipeline, state_root) / f"stratum-{stratum}.state"


def load_state(path: Path) -> StratumState | None:
    """The saved state, or None when there is none (or it is of another format)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        fmt, fields = pickle.loads(blob)
    except Exception:  # a state this code cannot read is no state: the caller rebuilds
        return None
    if fmt != STATE_FORMAT:
        return None
    return StratumState(**fields)


def save_state(path: Path, state: StratumState) -> int:
    """Write ``state`` atomically; returns its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = pickle.dumps((STATE_FORMAT, vars(state)), protocol=pickle.HIGHEST_PROTOCOL)
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
