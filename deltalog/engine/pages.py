"""Compiled lookups of sorted keys through fences (``storage.CodedRows``): a module of its
own, so that the store's code depends on no kernel of a maintainer. Compiled by numba
(``warm``) and cached beside this file."""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def lower_in(keys, x, a, b):
    """The first position of sorted ``keys`` not below x, known to be in [a, b]."""
    while a < b:
        m = (a + b) >> 1
        if keys[m] < x:
            a = m + 1
        else:
            b = m
    return a


@njit(cache=True, nogil=True)
def page_find(keys, fences, step, found, hit):
    """hit[i]: whether sorted ``keys`` hold found[i] (a negative one: never), looked up in
    its page only: the ``step`` keys from the last fence (every step-th key) not above it,
    so a lookup reads one page of keys, not a score of them."""
    n = keys.shape[0]
    for i in range(found.shape[0]):
        x = found[i]
        hit[i] = False
        if x < 0:
            continue
        a, b = 0, fences.shape[0]  # the first fence above x
        while a < b:
            m = (a + b) >> 1
            if fences[m] <= x:
                a = m + 1
            else:
                b = m
        if a == 0:
            continue
        lo = lower_in(keys, x, (a - 1) * step, min(a * step, n))
        hit[i] = lo < n and keys[lo] == x


_warm = False


def warm() -> None:
    """Compile (or load from numba's cache) ``page_find`` for the arrays the store passes."""
    global _warm
    if not _warm:
        keys, fences = np.arange(4, dtype=np.int64), np.arange(0, 4, 2, dtype=np.int64)
        fixed, fixed_fences = keys.copy(), fences.copy()
        # (keys mapped from a saved state are read-only)
        fixed.flags.writeable = fixed_fences.flags.writeable = False
        for k in (keys, fixed):
            for f in (fences, fixed_fences):
                page_find(k, f, 2, keys.copy(), np.zeros(4, np.bool_))
        _warm = True
