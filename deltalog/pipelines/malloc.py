"""The C allocator's settings for a process that runs the engine.

The engine's loads and large commits make and drop numpy arrays of megabytes, round after
round (a recursive stratum's load: one merge per round of a million-row relation). glibc's
malloc gives each array above its mmap threshold (at first 128 KiB, rising to at most 32
MiB as such arrays are freed) pages of its own and hands them back to the system when it
is freed, and it trims the heap's free top past twice that threshold; the next array of
that size then takes fresh pages, which the kernel must fault in and zero. Both are
fixed here (setting either alone stops glibc adjusting the other, which changed nothing
measurable). Measured on the random closure's first load (2,000 nodes, 10,000 edges, 3.9
million paths; 2 cores): 3.0-3.3 s with glibc's defaults, 2.4 s with arrays up to 32 MiB
kept in the heap and up to 1 GiB of free heap kept for reuse; the peak RSS is the same
(what a process holds at its peak is what it uses), only memory freed after it stays with
the process.

``tune_malloc`` sets both through ``mallopt``, once per process, where the C library is
glibc (elsewhere it changes nothing). The CLI, every stratum run (Dagster's runs
included), the partitions Spark runs and the benchmarks call it. ``DELTALOG_MALLOC=default``
keeps glibc's own settings.
"""

import ctypes
import ctypes.util
import os
import sys

ENV = "DELTALOG_MALLOC"
M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit
TRIM_THRESHOLD = 1 << 30

_done: bool | None = None


def tune_malloc() -> bool:
    """Keep freed arrays of up to 32 MiB, and up to 1 GiB of free heap, in the process for
    reuse (see the module). Whether the settings are in force (False: not glibc, or
    ``DELTALOG_MALLOC=default``). Only the first call acts."""
    global _done
    if _done is None:
        _done = _apply()
    return _done


def _apply() -> bool:
    if os.environ.get(ENV, "") == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
