"""The allocator settings of the engine's processes (``deltalog.pipelines.malloc``): on
glibc, an array of megabytes freed stays in the process for the next one (no fresh pages
to fault in), and ``DELTALOG_MALLOC=default`` keeps glibc's own behaviour. Each case runs
in a process of its own (the settings are process-wide)."""

import os
import subprocess
import sys

import pytest

CHILD = r"""
import ctypes, sys
import numpy as np
from deltalog.pipelines.malloc import tune_malloc

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
tuned = tune_malloc()
again = tune_malloc()
a = np.ones(2 << 20, np.int64)  # 16 MiB
del a
print(tuned, again, libc.mallinfo2().fordblks >= 16 << 20)
"""

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")


def _child(**env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k != "DELTALOG_MALLOC"}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, env={**base, **env}, timeout=120)
    return out.stdout.split()


@glibc
def test_a_freed_array_of_megabytes_stays_in_the_process():
    assert _child() == ["True", "True", "True"]


@glibc
def test_default_keeps_glibcs_own_settings():
    assert _child(DELTALOG_MALLOC="default") == ["False", "False", "False"]
