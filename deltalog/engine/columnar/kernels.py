"""Compiled loops of the columnar evaluator (``deltalog.engine.columnar.evaluate``): leapfrog
triejoin over sorted integer arrays, and the merges of sorted rows that keep relations
sorted through semi-naive iteration. Compiled by numba and cached beside this file.

A relation's index is a C-contiguous ``int64`` array of shape (rows, columns), its rows
distinct and sorted lexicographically in the plan's column order: the trie is implicit,
depth d is column d, and the rows sharing a prefix are one contiguous range (Veldhuizen,
"Leapfrog Triejoin: a worst-case optimal join algorithm", §3: every trie operation is a
search inside that range). ``seek`` gallops from the current position, so a run of
nearby keys costs what their distance costs, not a binary search each.
"""

import numpy as np
from numba import njit
from numba.typed import List

# Level kinds of a join plan.
JOIN = 0  # the level's value is the intersection of its atoms' columns
CONST = 1  # the level's value is a constant code (an atom's constant argument)
COPY = 2  # the level's value is an earlier level's (a repeated variable, `x = y`)
# The level's value is an earlier level's number in the other coding (``x = x~int``,
# ``semantics.bind_as``): the float equal to an int, the int equal to a float; none
# where there is none (the level then fails, as a seek that misses).
FLOAT_OF_INT = 3
INT_OF_FLOAT = 4

# Comparison operators, as the plan encodes them.
OPS = {"=": 0, "!=": 1, "<": 2, "<=": 3, ">": 4, ">=": 5}

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
# Interval ends of the recording (``lftj``'s ``record``): below and above every code.
BOT = INT64_MIN
TOP = INT64_MAX

# Counter slots (``N_COUNTERS`` of them). C_BEYOND counts floats a conversion to int
# (``INT_OF_FLOAT``) found integral but beyond the int64s: their int has no code, so the
# join binds nothing there where Python's int would be looked up (and, recording, notes
# no interval): a sensitivity recording or commit that meets one is refused.
C_OPENS, C_SEEKS, C_NEXTS, C_EMITS, C_BEYOND = 0, 1, 2, 3, 4
N_COUNTERS = 5

# The joins take a rule's atoms' arrays as one tuple, which numba compiles once per
# length: padded with empty arrays to ``ATOM_SLOTS``, one compilation serves every rule
# of up to 16 atoms (the padding is never read: no slot names it). A larger body passes
# a typed list instead (one more compilation for every size: a tuple of 256 arrays took
# about 35 s more to compile than the list; an item of the list costs a little more to
# read than one of a tuple).
ATOM_SLOTS = 16
_NO_ROWS = np.zeros((0, 1), np.int64)


def atom_tuple(arrays: "list[np.ndarray] | tuple[np.ndarray, ...]"
               ) -> "tuple[np.ndarray, ...] | List[np.ndarray]":
    """``arrays`` (C-contiguous int64, two dimensions) as the joins take them: padded, or
    a typed list past ``ATOM_SLOTS``."""
    if len(arrays) > ATOM_SLOTS:
        return List(arrays)
    return (*arrays, *(_NO_ROWS,) * (ATOM_SLOTS - len(arrays)))


@njit(cache=True, nogil=True, inline="always")
def _gallop(rel, d, lo, hi, v):
    """The first row in [lo, hi) whose column d is >= v (rows sorted on column d there)."""
    if lo >= hi or rel[lo, d] >= v:
        return lo
    step = 1
    prev = lo
    cur = lo + 1
    while cur < hi and rel[cur, d] < v:
        prev = cur
        step *= 2
        cur = lo + step
    if cur > hi:
        cur = hi
    lo2 = prev + 1
    hi2 = cur
    while lo2 < hi2:
        mid = (lo2 + hi2) >> 1
        if rel[mid, d] < v:
            lo2 = mid + 1
        else:
            hi2 = mid
    return lo2


@njit(cache=True, nogil=True, inline="always")
def _past(rel, d, lo, hi, v):
    """The first row in [lo, hi) whose column d is > v (rows sorted on column d there)."""
    if v == INT64_MAX:
        return hi
    return _gallop(rel, d, lo, hi, v + 1)


_TWO_63 = 2.0**63


@njit(cache=True, nogil=True, inline="always")
def _float_of_int(i):
    """(whether a float equals the int ``i``, that float's code: ``float_codes``)."""
    f = np.float64(i)
    if f >= _TWO_63 or np.int64(f) != i:  # (2**63 - 1 rounds up to 2**63)
        return False, np.int64(0)
    bits = np.float64(f).view(np.int64)  # (no int gives -0.0)
    return True, bits ^ ((bits >> 63) & INT64_MAX)


@njit(cache=True, nogil=True, inline="always")
def _int_of_float(c):
    """(whether an int64 equals the float of code ``c``, that int)."""
    f = np.int64(c ^ ((c >> 63) & INT64_MAX)).view(np.float64)
    if not (-_TWO_63 <= f < _TWO_63) or np.floor(f) != f:  # (NaN fails the first)
        return False, np.int64(0)
    return True, np.int64(f)


@njit(cache=True, nogil=True, inline="always")
def _beyond_int64(c):
    """Whether the float of code ``c`` is finite and outside the int64 range (so
    integral, with an int that has no code)."""
    f = np.int64(c ^ ((c >> 63) & INT64_MAX)).view(np.float64)
    return not (-_TWO_63 <= f < _TWO_63) and f - f == 0.0  # (inf - inf and NaN: NaN)


@njit(cache=True, nogil=True, inline="always")
def _given(kind, arg, val, counters):
    """(whether there is one, the value) of a level that a constant or an earlier level
    gives (``kind`` CONST, COPY, FLOAT_OF_INT or INT_OF_FLOAT; ``arg`` the code or the
    level), a conversion counted in ``counters[C_BEYOND]`` when it meets a float beyond
    the int64s."""
    if kind == CONST:
        return True, np.int64(arg)
    if kind == COPY:
        return True, val[arg]
    if kind == FLOAT_OF_INT:
        return _float_of_int(val[arg])
    found, v = _int_of_float(val[arg])
    if not found and _beyond_int64(val[arg]):
        counters[C_BEYOND] += 1
    return found, v


@njit(cache=True, nogil=True, inline="always")
def _compare(op, a, b):
    if op == 0:
        return a == b
    if op == 1:
        return a != b
    if op == 2:
        return a < b
    if op == 3:
        return a <= b
    if op == 4:
        return a > b
    return a >= b


@njit(cache=True, nogil=True, inline="always")
def _note(rec, rn, s, lo, hi, val, L):
    """Record interval [lo, hi] of slot ``s`` at level ``L``: (slot, lo, hi, the values of
    levels 0..L-1) as row ``rn`` of ``rec`` when it has that row; counted either way (the
    caller runs the join again with room for all when it did not: an array grown, so
    rebound, in the join's loop would cost two atomic reference counts at every step)."""
    if rn < rec.shape[0]:
        rec[rn, 0] = s
        rec[rn, 1] = lo
        rec[rn, 2] = hi
        for j in range(L):
            rec[rn, 3 + j] = val[j]
    return rn + 1


@njit(cache=True, nogil=True)
def lftj(rels, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
         chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv,
         low_kind, low_val, low_strict, out_levels, exist_level, counters, lo0, hi0,
         slot_rec, rec):
    """The join (``_lftj``), recording when ``rec`` has rows; compiled twice, each copy
    with the recording a constant (so the evaluation's has none of its branches)."""
    if rec.shape[0] > 0:
        return _lftj(rels, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
                     chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv,
                     low_kind, low_val, low_strict, out_levels, exist_level, counters,
                     lo0, hi0, slot_rec, rec, True)
    return _lftj(rels, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
                 chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv,
                 low_kind, low_val, low_strict, out_levels, exist_level, counters,
                 lo0, hi0, slot_rec, rec, False)


@njit(cache=True, nogil=True, inline="always")
def _lftj(rels, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
          chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv,
          low_kind, low_val, low_strict, out_levels, exist_level, counters, lo0, hi0,
          slot_rec, rec, record):
    """Every binding of the plan's levels, projected on ``out_levels`` (rows of the result).

    Level L binds one variable: ``lev_kind[L]`` JOIN (leapfrog over the atoms in slots
    ``lev_ptr[L]:lev_ptr[L+1]``, each reading column ``slot_depth`` of atom ``slot_atom``),
    CONST (code ``lev_arg[L]``), COPY (the value of level ``lev_arg[L]``) or FLOAT_OF_INT,
    INT_OF_FLOAT (that value converted between the int and the float coding; none where
    no number of the other type equals it: the level fails); the atoms of such a level
    must hold its value. Checks ``chk_ptr[L]:chk_ptr[L+1]`` run once
    level L is bound: ``left op right`` with operands a level's value (kind 0) or a code
    (kind 1). ``low_*`` give a JOIN level a lower bound (kind 0 level, kind 1 code, -1
    none; strict: ``>``), a shortcut for a check that stays. Levels from ``exist_level``
    on are existential: one witness is enough, the search backs up at the first.

    The first level's values are restricted to [lo0, hi0]: threads split a join by them.
    A recording split so is cut at values every first-level atom holds (``lo0``, unless
    −inf, is one), where the whole join's leapfrog agrees: a piece starts as that join
    stands on lo0, its atoms' ranges not cut, and ends where it agrees past hi0 (the
    operations that reach that value are this piece's). Each piece records what the
    whole join records between its two agreements, in the same order, so the pieces'
    records, one after the other, are the whole join's.

    When the last level reads one atom's last column and checks nothing, its values are
    distinct: the rows of its range are emitted in one loop (a run, not a search each).

    With ``rec`` of width 3 + levels (empty: no recording), every iterator operation of a
    slot with ``slot_rec[s]`` records its sensitivity interval (Veldhuizen 2014, §4.1) as a
    row (slot, lo, hi, values of the earlier levels), ends ``BOT``/``TOP`` standing for
    −inf/+inf: a seek to t landing on k (or the end) gives [t, k]; moving past v to k
    gives [v, k]; opening a level gives (−inf, k] for the atom whose first key k is the
    greatest ([b, k] under a lower bound b: values below it fail a check whatever the
    data), [k, k] for the others already on k, and (−inf, +inf) for an atom with no key
    there; a last-level run of keys k1..kn gives (−inf, k1], [k1, k2], ..., [kn, +inf).
    Any change to an atom's keys that could change what the join does falls inside an
    interval recorded for that atom under the same earlier values.
    Returns the rows (the first ``n`` of the array), ``n``, the records and their number
    (more than ``rec`` holds when it was too small: ``run_lftj`` runs it again).
    """
    rn = 0
    nlev = lev_kind.shape[0]
    nslots = slot_atom.shape[0]
    natoms = len(rels)
    maxd = 1
    for s in range(nslots):
        if slot_depth[s] + 2 > maxd:
            maxd = slot_depth[s] + 2
    # Ranges per atom and depth: the rows sharing the prefix bound so far.
    alo = np.zeros((natoms, maxd), np.int64)
    ahi = np.zeros((natoms, maxd), np.int64)
    for a in range(natoms):
        ahi[a, 0] = rels[a].shape[0]
    resume = record and lo0 > INT64_MIN
    if nlev > 0 and not record:
        for s in range(lev_ptr[0], lev_ptr[1]):
            a = slot_atom[s]
            rel = rels[a]
            alo[a, 0] = _gallop(rel, 0, 0, rel.shape[0], lo0)
            ahi[a, 0] = _past(rel, 0, alo[a, 0], rel.shape[0], hi0)
    pos = np.zeros(nslots, np.int64)
    val = np.zeros(max(nlev, 1), np.int64)
    nout = out_levels.shape[0]
    out = np.empty((1024, nout), np.int64)
    n = 0
    if nlev == 0:
        return out, 1, rec, 0
    last = nlev - 1
    s_last = lev_ptr[last]
    run_last = (lev_kind[last] == JOIN and lev_ptr[nlev] - s_last == 1
                and chk_ptr[last] == chk_ptr[nlev] and low_kind[last] < 0
                and exist_level >= nlev
                and slot_depth[s_last] == rels[slot_atom[s_last]].shape[1] - 1)
    L = 0
    entering = True
    while True:
        if run_last and entering and last == L:
            a = slot_atom[s_last]
            d = slot_depth[s_last]
            rel = rels[a]
            lo = alo[a, d]
            hi = ahi[a, d]
            counters[C_OPENS] += 1
            if record and slot_rec[s_last]:
                if lo == hi:
                    rn = _note(rec, rn, s_last, BOT, TOP, val, L)
                else:
                    rn = _note(rec, rn, s_last, BOT, rel[lo, d], val, L)
                    for p in range(lo, hi - 1):
                        rn = _note(rec, rn, s_last, rel[p, d], rel[p + 1, d], val, L)
                    rn = _note(rec, rn, s_last, rel[hi - 1, d], TOP, val, L)
            if n + hi - lo > out.shape[0]:
                out = _grown(out, n + hi - lo)
            for p in range(lo, hi):
                val[L] = rel[p, d]
                for j in range(nout):
                    out[n, j] = val[out_levels[j]]
                n += 1
            counters[C_NEXTS] += hi - lo
            counters[C_EMITS] += hi - lo
            L -= 1
            entering = False
            if L < 0:
                break
            continue
        s0 = lev_ptr[L]
        s1 = lev_ptr[L + 1]
        kind = lev_kind[L]
        found = False
        v = 0
        # A lower bound's target, and the value it is taken from (``x > c`` seeks c + 1:
        # a seek to it records from c, as a string not coded yet may sort between).
        bound = BOT
        bound_at = BOT
        if resume:  # (level 0 of a piece of a split recording: it stands on lo0)
            resume = False
            for s in range(s0, s1):
                a = slot_atom[s]
                pos[s] = _gallop(rels[a], 0, 0, ahi[a, 0], lo0)
            found = True
            v = lo0
        elif kind == JOIN:
            if entering:
                counters[C_OPENS] += 1
                empty = False
                for s in range(s0, s1):
                    a = slot_atom[s]
                    d = slot_depth[s]
                    pos[s] = alo[a, d]
                    if pos[s] >= ahi[a, d] and not empty:
                        empty = True
                        if record and slot_rec[s]:
                            rn = _note(rec, rn, s, BOT, TOP, val, L)
                if empty:
                    found = False
                    target = 0
                    have_target = False
                else:
                    have_target = False
                    target = 0
                    lk = low_kind[L]
                    if lk >= 0:
                        target = val[low_val[L]] if lk == 0 else low_val[L]
                        have_target = True
                        bound_at = target
                        if low_strict[L]:
                            if target == INT64_MAX:
                                empty = True
                            else:
                                target += 1
                        bound = target
            else:
                # Past the current value: every atom's position to the end of its run.
                counters[C_NEXTS] += 1
                for s in range(s0, s1):
                    a = slot_atom[s]
                    d = slot_depth[s]
                    pos[s] = ahi[a, d + 1]
                    if record and slot_rec[s]:
                        k = TOP if pos[s] >= ahi[a, d] else rels[a][pos[s], d]
                        rn = _note(rec, rn, s, val[L], k, val, L)
                have_target = False
                target = 0
                empty = False
            if not empty:
                # Leapfrog: seek every atom to the largest key until all agree.
                for s in range(s0, s1):
                    a = slot_atom[s]
                    d = slot_depth[s]
                    if pos[s] >= ahi[a, d]:
                        empty = True
                        break
                    k = rels[a][pos[s], d]
                    if not have_target or k > target:
                        target = k
                        have_target = True
                if record and entering and not empty:
                    rn = _open_notes(rels, slot_atom, slot_depth, slot_rec, pos, s0, s1,
                                     bound_at, target, val, L, rec, rn)
                while not empty:
                    agreed = True
                    for s in range(s0, s1):
                        a = slot_atom[s]
                        d = slot_depth[s]
                        rel = rels[a]
                        if rel[pos[s], d] < target:
                            counters[C_SEEKS] += 1
                            pos[s] = _gallop(rel, d, pos[s], ahi[a, d], target)
                            if record and slot_rec[s]:
                                k = TOP if pos[s] >= ahi[a, d] else rel[pos[s], d]
                                t = bound_at if target == bound else target
                                rn = _note(rec, rn, s, t, k, val, L)
                            if pos[s] >= ahi[a, d]:
                                empty = True
                                break
                        k = rel[pos[s], d]
                        if k > target:
                            target = k
                            agreed = False
                    if empty:
                        break
                    if agreed:
                        found = True
                        v = target
                        if record and L == 0 and v > hi0:
                            found = False  # (the next piece's: it starts there)
                        break
        else:
            if entering:
                found, v = _given(kind, lev_arg[L], val, counters)
                for s in range(s0, s1 if found else s0):
                    a = slot_atom[s]
                    d = slot_depth[s]
                    counters[C_SEEKS] += 1
                    p = _gallop(rels[a], d, alo[a, d], ahi[a, d], v)
                    pos[s] = p
                    if record and slot_rec[s]:
                        k = TOP if p >= ahi[a, d] else rels[a][p, d]
                        rn = _note(rec, rn, s, v, k, val, L)
                    if p >= ahi[a, d] or rels[a][p, d] != v:
                        found = False
                        break
        if not found:
            L -= 1
            entering = False
            if L < 0:
                break
            continue
        val[L] = v
        # The children's ranges: the run of v in each atom.
        for s in range(s0, s1):
            a = slot_atom[s]
            d = slot_depth[s]
            rel = rels[a]
            p = pos[s]
            e = p + 1
            hi = ahi[a, d]
            if e < hi and rel[e, d] == v:
                e = _past(rel, d, e, hi, v)
            alo[a, d + 1] = p
            ahi[a, d + 1] = e
        ok = True
        for c in range(chk_ptr[L], chk_ptr[L + 1]):
            x = val[chk_lv[c]] if chk_lk[c] == 0 else chk_lv[c]
            y = val[chk_rv[c]] if chk_rk[c] == 0 else chk_rv[c]
            if not _compare(chk_op[c], x, y):
                ok = False
                break
        if not ok:
            entering = False  # the next value of this level (none for CONST or COPY)
            continue
        if nlev > L + 1:
            L += 1
            entering = True
            continue
        # A whole binding.
        if n == out.shape[0]:
            out = _grown(out, n + 1)
        for j in range(nout):
            out[n, j] = val[out_levels[j]]
        n += 1
        counters[C_EMITS] += 1
        if exist_level < nlev:
            # Levels past exist_level only witness: back up to the last level that counts.
            L = exist_level - 1
            if L < 0:
                break
        entering = False
    return out, n, rec, rn


@njit(cache=True, nogil=True, inline="always")
def _open_notes(rels, slot_atom, slot_depth, slot_rec, pos, s0, s1, bound, target, val,
                L, rec, rn):
    """The intervals of a level's opens (see ``lftj``): ``target`` is the greatest first
    key, or the lower bound taken from ``bound`` (``BOT``: none) when that is greater; the
    slots below it record their seeks."""
    best = -1
    kbest = 0
    for s in range(s0, s1):
        k = rels[slot_atom[s]][pos[s], slot_depth[s]]
        if best < 0 or k > kbest:
            best = s
            kbest = k
    for s in range(s0, s1):
        if not slot_rec[s]:
            continue
        k = rels[slot_atom[s]][pos[s], slot_depth[s]]
        if s == best and k == target:
            rn = _note(rec, rn, s, bound, k, val, L)
        elif k == target:
            rn = _note(rec, rn, s, k, k, val, L)
    return rn


@njit(cache=True, nogil=True)
def _grown(out, need):
    cap = max(need, 2 * out.shape[0], 1024)
    grown = np.empty((cap, out.shape[1]), np.int64)
    grown[: out.shape[0]] = out
    return grown


@njit(cache=True, nogil=True, inline="always")
def _hash(buf, i):
    h = np.uint64(0x9E3779B97F4A7C15)
    for c in range(buf.shape[1]):
        h ^= np.uint64(buf[i, c])
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    return h


@njit(cache=True, nogil=True, inline="always")
def _same(buf, i, j):
    for c in range(buf.shape[1]):  # noqa: SIM110 (a loop numba compiles)
        if buf[i, c] != buf[j, c]:
            return False
    return True


@njit(cache=True, nogil=True)
def _insert(table, buf, i):
    """Row i of buf into the hash set ``table`` (row ids; -1 free) unless an equal row is
    there; whether it went in."""
    mask = np.uint64(table.shape[0] - 1)
    s = np.int64(_hash(buf, i) & mask)
    while True:
        j = table[s]
        if j < 0:
            table[s] = i
            return True
        if _same(buf, j, i):
            return False
        s = np.int64((np.uint64(s) + np.uint64(1)) & mask)


@njit(cache=True, nogil=True)
def _rehash(table, buf, n):
    """A table twice the size (at least 16 slots) holding rows 0..n-1 (distinct)."""
    size = max(2 * table.shape[0], 16)
    while size < 2 * (n + 1):
        size *= 2
    grown = np.full(size, -1, np.int64)
    for i in range(n):
        _insert(grown, buf, i)
    return grown


@njit(cache=True, nogil=True)
def hash_build(buf, n):
    """The hash set of rows 0..n-1 of buf (distinct)."""
    return _rehash(np.full(1, -1, np.int64), buf, n)


@njit(cache=True, nogil=True)
def first_rows(buf):
    """Whether each row of ``buf`` is the first of its value (a hash set, O(n))."""
    n = buf.shape[0]
    keep = np.zeros(n, np.bool_)
    size = 16
    while size < 2 * (n + 1):
        size *= 2
    table = np.full(size, -1, np.int64)
    for i in range(n):
        keep[i] = _insert(table, buf, i)
    return keep


@njit(cache=True, nogil=True)
def hash_add(table, buf, n, rows):
    """Append the rows not in the set (nor repeated) after row n of buf (which has room);
    the new count and table."""
    for r in range(rows.shape[0]):
        for c in range(rows.shape[1]):
            buf[n, c] = rows[r, c]
        if 2 * (n + 1) > table.shape[0]:
            table = _rehash(table, buf, n)
        if _insert(table, buf, n):
            n += 1
    return n, table


@njit(cache=True, nogil=True)
def row_less(a, i, b, j):
    """-1, 0 or 1 as row i of a is below, equal to or above row j of b."""
    for c in range(a.shape[1]):
        x = a[i, c]
        y = b[j, c]
        if x < y:
            return -1
        if x > y:
            return 1
    return 0


@njit(cache=True, nogil=True)
def merge_rows(a, b):
    """The rows of a and b (each sorted, distinct) sorted and distinct."""
    na, nb = a.shape[0], b.shape[0]
    out = np.empty((na + nb, a.shape[1]), np.int64)
    i = j = n = 0
    while i < na and j < nb:
        c = row_less(a, i, b, j)
        if c <= 0:
            out[n] = a[i]
            i += 1
            if c == 0:
                j += 1
        else:
            out[n] = b[j]
            j += 1
        n += 1
    while i < na:
        out[n] = a[i]
        i += 1
        n += 1
    while j < nb:
        out[n] = b[j]
        j += 1
        n += 1
    return out[:n]


@njit(cache=True, nogil=True)
def distinct_sorted(a):
    """Which rows of a (sorted) differ from the row before them."""
    n = a.shape[0]
    keep = np.ones(n, np.bool_)
    for i in range(1, n):
        if row_less(a, i - 1, a, i) == 0:
            keep[i] = False
    return keep


@njit(cache=True, nogil=True)
def has_prefix(index, queries):
    """For each query row (its columns the first columns of ``index``, sorted), whether
    some row of ``index`` starts with it."""
    n = queries.shape[0]
    k = queries.shape[1]
    out = np.zeros(n, np.bool_)
    rows = index.shape[0]
    for q in range(n):
        lo = 0
        hi = rows
        for c in range(k):
            v = queries[q, c]
            lo = _gallop(index, c, lo, hi, v)
            if lo >= hi or index[lo, c] != v:
                lo = hi
                break
            hi = _past(index, c, lo + 1, hi, v)
        out[q] = lo < hi
    return out


@njit(cache=True, nogil=True)
def absent_keys(keys, held):
    """Which of ``keys`` (sorted, distinct) ``held`` (sorted) does not hold; galloping, so
    a few keys against a large set cost their number times a logarithm."""
    n = keys.shape[0]
    m = held.shape[0]
    column = held.reshape((m, 1))
    out = np.ones(n, np.bool_)
    j = 0
    for i in range(n):
        j = _gallop(column, 0, j, m, keys[i])
        if j < m and held[j] == keys[i]:
            out[i] = False
    return out


@njit(cache=True, nogil=True)
def bounds(rows):
    """Each column's minimum and maximum (rows not empty), in one pass."""
    k = rows.shape[1]
    lo = rows[0].copy()
    hi = rows[0].copy()
    for i in range(1, rows.shape[0]):
        for c in range(k):
            v = rows[i, c]
            if v < lo[c]:
                lo[c] = v
            elif v > hi[c]:
                hi[c] = v
    return lo, hi


@njit(cache=True, nogil=True)
def pack(rows, lo, shifts):
    """One int64 key per row: column c offset by lo[c], shifted up shifts[c] bits."""
    n = rows.shape[0]
    keys = np.zeros(n, np.int64)
    for i in range(n):
        k = 0
        for c in range(rows.shape[1]):
            k |= (rows[i, c] - lo[c]) << shifts[c]
        keys[i] = k
    return keys


@njit(cache=True, nogil=True)
def sorted_distinct_already(rows):
    """Whether the rows are sorted lexicographically without repeats."""
    for i in range(1, rows.shape[0]):  # noqa: SIM110 (a loop numba compiles)
        if row_less(rows, i - 1, rows, i) >= 0:
            return False
    return True
