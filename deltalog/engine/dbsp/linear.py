"""The inner loop of a linear binary closure in one compiled call (``columnar.Linear``:
a stratum of one binary relation P defined by one rule copying an input, P(a, b) :-
B(a, b), and one linear rule joining P with an input E on one variable, P(x, z) :-
P(x, y), E(y, z) or any order of atoms and columns of that shape). A commit of the
columnar kernel runs tens of numpy calls per inner iteration (delta queries, first
touches, ↑↑H, Δδo); here the whole loop of ``ColumnarStratum._apply`` runs in one call,
on the same arrays and with the same arithmetic, but for the versions the two terms read:

    Δc[0] = the base rule's change (given);
    Δc[t] = ΔE ⋈ δo[t-1] (P's old version) + Δδo[t-1] ⋈ E (E's new version), t ≥ 1;

(the generic steps read the versions by atom order, as a rule's delta queries do;
both ways give the same Δc[t]: δo_new ⋈ E_new − δo_old ⋈ E_old is either sum). The old
version makes the term of ΔE cheap: P's old depths do not move during the loop, so the
rows ΔE joins are read once, at the first iteration, and grouped by depth
(``_rows_by_depth``); iteration t takes the group of depth t-1. (Reading P's new version
would mean reading every row joined at every iteration and keeping those of depth t-1: a
single edge into a node the closure reaches from everywhere reads its 2,000 rows nine
times.) Each Δc[t] touches its facts (``kernels.touch``), ↑↑H decides them (``kernels.decide``),
Δδo[t] is the touched facts whose membership at depth t changed, and iterations where
nothing can change are skipped as ``ColumnarStratum._next_active`` does.

A fact never seen gets the next id (in key order within an iteration, as
``_Rel.add_young`` gives them, when Δc[t] is small enough to be sorted: ``_zset``) and
goes into the relation's hash index at once; the
caller adds the commit's new facts to the sorted parts after the call (a new fact is
in no sorted part during the loop: the term of ΔE reads them from the touched facts).
The caller owns every array: when one lacks room for an iteration, the call returns
``ROOM`` with the sizes needed in ``st`` before it changes anything of that iteration,
and is called again (with the arrays grown) to go on from there.

``st`` (int64) holds the loop's state between calls; its fields are named below.
"""

import numpy as np
from numba import njit

from deltalog.engine.dbsp.kernels import (
    NONE,
    _lower,
    decide,
    drop_zeros,
    hash_probe,
    hash_slot,
    next_event,
    sum_by_key,
    touch,
)

# fields of ``st``
T = 0  # the iteration to run next
RAN = 1  # iterations run
SKIPPED = 2  # iterations skipped
N = 3  # touched facts (slots)
G_N = 4  # old births gathered
LOG_N = 5  # Δc entries logged (slot, t, count)
M_NEW = 6  # facts never seen, given ids from n_ids0 on
LAST_N = 7  # Δδo[t-1]: entries in last_s, last_w
HASH_N = 8  # keys in the hash index
QUERIES = 9  # delta queries run (a term with a non-empty seed)
GATHERED = 10  # rows looked at by the delta queries
NEED_FACTS, NEED_BIRTHS, NEED_LOG, NEED_IDS, NEED_HASH = 11, 12, 13, 14, 15
# Δc[st[T]] was computed by the call that returned ``ROOM`` (given back to this one), with
# these rows looked at and queries run
PENDING, PENDING_SEEN, PENDING_QUERIES = 16, 17, 18
GROUPED = 19  # the rows of ΔE's term were counted in GATHERED (by an earlier call)
FIELDS = 20

DONE = 0
ROOM = 1

_LOW = 0xFFFFFFFF


@njit(cache=True, nogil=True, inline="always")
def _head(pother, eother, pfirst):
    if pfirst:
        return (pother << 32) | eother
    return (eother << 32) | pother


@njit(cache=True, nogil=True, inline="always")
def _split(key, jp):
    """(join code, other code) of a natural key of P whose join column is ``jp``."""
    if jp == 0:
        return key >> 32, key & _LOW
    return key & _LOW, key >> 32


@njit(cache=True, nogil=True, inline="always")
def _rows_in(keys, y):
    """The rows of a sorted part of P (join code high) with join code y: a..b."""
    return _lower(keys, y << 32), _lower(keys, (y + 1) << 32)


@njit(cache=True, nogil=True, inline="always")
def _gather_part(keys, ids, depth, a, b, eother, w, pfirst, gd, gk, gw, c):
    """Rows a..b of a sorted part of P, but tombstones: their depths, heads (P's other
    column, ``eother``) and weight w written to gd, gk, gw from c. Returns the new c."""
    by_id = ids.shape[0] > 0
    for j in range(a, b):
        d = depth[ids[j]] if by_id else depth[j]
        if d == NONE:
            continue
        gd[c] = d
        gk[c] = _head(keys[j] & _LOW, eother, pfirst)
        gw[c] = w
        c += 1
    return c


@njit(cache=True, nogil=True)
def _rows_by_depth(aj, ao, aw, pk0, pi0, pk1, pi1, pk2, pi2, depth, pfirst):
    """ΔE ⋈ P's old version, grouped by P's old depth: (start, keys, weights, rows looked
    at), the rows of depth d at start[d]..start[d+1] (heads, weights). (Counted first, so
    that no array grows in the loops.)"""
    n = aj.shape[0]
    r = np.empty((n, 6), np.int64)
    seen = 0
    for i in range(n):
        r[i, 0], r[i, 1] = _rows_in(pk0, aj[i])
        r[i, 2], r[i, 3] = _rows_in(pk1, aj[i])
        r[i, 4], r[i, 5] = _rows_in(pk2, aj[i])
        seen += r[i, 1] - r[i, 0] + r[i, 3] - r[i, 2] + r[i, 5] - r[i, 4]
    gd = np.empty(seen, np.int64)
    gk = np.empty(seen, np.int64)
    gw = np.empty(seen, np.int64)
    c = 0
    for i in range(n):
        c = _gather_part(pk0, pi0, depth, r[i, 0], r[i, 1], ao[i], aw[i], pfirst, gd, gk, gw,
                         c)
        c = _gather_part(pk1, pi1, depth, r[i, 2], r[i, 3], ao[i], aw[i], pfirst, gd, gk, gw,
                         c)
        c = _gather_part(pk2, pi2, depth, r[i, 4], r[i, 5], ao[i], aw[i], pfirst, gd, gk, gw,
                         c)
    deepest = -1
    for i in range(c):
        deepest = max(deepest, gd[i])
    start = np.zeros(deepest + 2, np.int64)
    for i in range(c):
        start[gd[i] + 1] += 1
    for d in range(deepest + 1):
        start[d + 1] += start[d]
    at = start[:-1].copy()
    bk = np.empty(c, np.int64)
    bw = np.empty(c, np.int64)
    for i in range(c):
        p = at[gd[i]]
        bk[p] = gk[i]
        bw[p] = gw[i]
        at[gd[i]] += 1
    return start, bk, bw, seen


@njit(cache=True, nogil=True)
def _next_depth(start, d):
    """The least depth ≥ d with rows in ``_rows_by_depth``'s groups; -1 if none."""
    for e in range(max(d, 0), start.shape[0] - 1):
        if start[e + 1] > start[e]:
            return e
    return -1


@njit(cache=True, nogil=True)
def _delta_c(t, st, has_e, start, bk, bw, jp, pfirst, ek, epk, epd, t_keys, last_s,
             last_w):
    """Δc[t] (t ≥ 1) as distinct sorted keys and counts; the rows looked at and the
    queries run (the term of ΔE, ``has_e``: its rows by depth, read before). The pairs
    are counted before they are written, so the output is never grown (an array grown in
    a loop costs reference counts at every row)."""
    d = t - 1
    e0 = e1 = 0
    if has_e and d + 1 < start.shape[0]:
        e0, e1 = start[d], start[d + 1]
    k = st[LAST_N]
    ra = np.empty(k, np.int64)  # E's rows of each Δδo[t-1] entry: ra..rb in ek
    rb = np.empty(k, np.int64)
    pa = np.zeros(k, np.int64)  # and pa..pb in the patch
    pb = np.zeros(k, np.int64)
    total = e1 - e0
    for q in range(k):
        y = _split(t_keys[last_s[q]], jp)[0]
        ra[q] = _lower(ek, y << 32)
        rb[q] = _lower(ek, (y + 1) << 32)
        total += rb[q] - ra[q]
        if epk.shape[0]:
            pa[q] = _lower(epk, y << 32)
            pb[q] = _lower(epk, (y + 1) << 32)
            total += pb[q] - pa[q]
    out_k = np.empty(total, np.int64)
    out_w = np.empty(total, np.int64)
    c = 0
    for p in range(e0, e1):  # ΔE ⋈ δo[t-1], P's old version
        out_k[c] = bk[p]
        out_w[c] = bw[p]
        c += 1
    for q in range(k):  # Δδo[t-1] ⋈ E
        pother = _split(t_keys[last_s[q]], jp)[1]
        w = last_w[q]
        at, end = pa[q], pb[q]  # the patch's keys of join code y, walked alongside
        for j in range(ra[q], rb[q]):
            if at < end:  # the patch holds this key: its entry decides
                while at < end and epk[at] < ek[j]:
                    at += 1
                if at < end and epk[at] == ek[j]:
                    continue
            out_k[c] = _head(pother, ek[j] & _LOW, pfirst)
            out_w[c] = w
            c += 1
        for j in range(pa[q], pb[q]):
            if epd[j] == 0:
                out_k[c] = _head(pother, epk[j] & _LOW, pfirst)
                out_w[c] = w
                c += 1
    seen = total - (e1 - e0)
    queries = int(has_e) + int(k > 0)
    ck, cw = _zset(out_k, out_w, c)
    return ck, cw, seen, queries


RADIX_MIN = 1 << 16  # more pairs than this: sorted by a radix sort (``_radix_zset``)


@njit(cache=True, nogil=True)
def _radix_zset(keys, w, n):
    """``_zset`` of many pairs, sorted by key: an LSD radix sort of the bytes that vary
    among the keys (a key of two small codes varies in a few), then equal keys summed.
    Sorted facts are touched in the order of their ids (the main part's ids are its keys'
    positions)."""
    k, v = keys[:n].copy(), w[:n].copy()
    k2, v2 = np.empty(n, np.int64), np.empty(n, np.int64)
    every, some = k[0], k[0]
    for i in range(n):
        every &= k[i]
        some |= k[i]
    vary = every ^ some
    count = np.empty(256, np.int64)
    for shift in range(0, 64, 8):
        if not (vary >> shift) & 0xFF:
            continue
        count[:] = 0
        for i in range(n):
            count[(k[i] >> shift) & 0xFF] += 1
        total = 0
        for d in range(256):
            c = count[d]
            count[d] = total
            total += c
        for i in range(n):
            d = (k[i] >> shift) & 0xFF
            k2[count[d]] = k[i]
            v2[count[d]] = v[i]
            count[d] += 1
        k, k2 = k2, k
        v, v2 = v2, v
    m = 0
    for i in range(n):
        if m > 0 and k[m - 1] == k[i]:
            v[m - 1] += v[i]
        else:
            k[m] = k[i]
            v[m] = v[i]
            m += 1
    return drop_zeros(k, v, m)


@njit(cache=True, nogil=True)
def _zset(keys, w, n):
    """The Z-set of the first n (key, weight) pairs: distinct keys, summed weights, no
    zeros; a few sorted by key (``kernels.sum_by_key``), more in no particular order (a
    hash table sums them: numba's sort of thousands of keys costs more than the rest of
    an iteration, and the touched facts need no order), many sorted again (a radix
    sort: in key order, the by-id arrays are read nearly in order)."""
    if n <= 64:
        return sum_by_key(keys[:n], w[:n])
    if n > RADIX_MIN:
        return _radix_zset(keys, w, n)
    bits = 4
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    tk = np.full(1 << bits, -1, np.int64)  # (keys are never negative)
    tw = np.zeros(1 << bits, np.int64)
    order = np.empty(n, np.int64)  # the table's slots in the order keys first came
    m = 0
    for i in range(n):
        s = hash_slot(keys[i], bits)
        while tk[s] >= 0 and tk[s] != keys[i]:
            s = (s + 1) & mask
        if tk[s] < 0:
            tk[s] = keys[i]
            order[m] = s
            m += 1
        tw[s] += w[i]
    out_k = np.empty(m, np.int64)
    out_w = np.empty(m, np.int64)
    c = 0
    for i in range(m):
        s = order[i]
        if tw[s] != 0:
            out_k[c] = tk[s]
            out_w[c] = tw[s]
            c += 1
    return out_k[:c], out_w[:c]


@njit(cache=True, nogil=True)
def linear_loop(st, c0k, c0w, q0, aj, ao, aw, pk0, pi0, pk1, pi1, pk2, pi2, jp, pfirst,
                ek, epk, epd, tk, tv, bits, depth, ndepth, slot, bstart, blen,
                pool_t, pool_w, n_ids0, hist, max_birth_old, t_ids, t_keys, t_old, t_new,
                t_dec, t_dr, t_gstart, t_glen, t_gnext, t_rold, g_t, g_w, log_s, log_t,
                log_w, last_s, last_w, pend_k, pend_w):
    """Run the inner loop from iteration st[T] until it is done (``DONE``) or an array
    lacks room for the next iteration (``ROOM``: st[NEED_*] the sizes needed, and Δc of
    that iteration returned, to be given back as ``pend_k``, ``pend_w``). Returns the
    code and Δc (keys, counts; empty when done).

    ``c0k``, ``c0w``: Δc[0] (sorted distinct keys, counts; ``q0`` the base rule's delta
    queries). ``aj``, ``ao``, ``aw``: ΔE by join code (sorted), other column, weight.
    ``pk*``/``pi*``: P's three sorted parts with join code high, with ids (empty: the
    positions; read in the old version). ``jp``: P's join column;
    ``pfirst``: the head's first column is P's other one. ``ek``, ``epk``, ``epd``: E's
    new version for the term of Δδo (keys with join code high, the patch). ``tk``, ``tv``,
    ``bits``: P's hash index; then P's by-id arrays, ``hist`` and the deepest old birth;
    then the touched facts' arrays (``columnar._Touched``), the log of Δc and Δδo[t-1]."""
    cap_facts = min(t_ids.shape[0], t_keys.shape[0], last_s.shape[0], last_w.shape[0])
    cap_ids = min(depth.shape[0], ndepth.shape[0], slot.shape[0], bstart.shape[0],
                  blen.shape[0])
    has_e = aj.shape[0] > 0
    start, bk, bw = np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    if has_e:  # ΔE ⋈ P's old version, by depth (read once: the old depths stay)
        start, bk, bw, seen = _rows_by_depth(aj, ao, aw, pk0, pi0, pk1, pi1, pk2, pi2, depth,
                                             pfirst)
        if not st[GROUPED]:
            st[GATHERED] += seen
            st[GROUPED] = 1
    mask = tk.shape[0] - 1
    while True:
        t = st[T]
        if st[PENDING]:
            ck, cw, seen, queries = pend_k, pend_w, st[PENDING_SEEN], st[PENDING_QUERIES]
            st[PENDING] = 0
        elif t == 0:
            ck, cw, seen, queries = c0k, c0w, 0, q0
        else:
            ck, cw, seen, queries = _delta_c(t, st, has_e, start, bk, bw, jp, pfirst, ek,
                                             epk, epd, t_keys, last_s, last_w)
        # room for this iteration (nothing changed yet)
        m = ck.shape[0]
        ids = np.empty(m, np.int64)
        fresh = 0
        facts = 0
        births = 0
        for i in range(m):
            f = hash_probe(tk, tv, bits, ck[i])
            ids[i] = f
            if f < 0:
                fresh += 1
                facts += 1
            elif slot[f] < 0:
                facts += 1
                births += blen[f]
        n, g_n, log_n, m_new, h_n = st[N], st[G_N], st[LOG_N], st[M_NEW], st[HASH_N]
        if (n + facts > cap_facts or g_n + births > g_t.shape[0]
                or log_n + m > log_s.shape[0] or n_ids0 + m_new + fresh > cap_ids
                or 2 * (h_n + fresh) > tk.shape[0]):
            st[NEED_FACTS] = n + facts
            st[NEED_BIRTHS] = g_n + births
            st[NEED_LOG] = log_n + m
            st[NEED_IDS] = n_ids0 + m_new + fresh
            st[NEED_HASH] = h_n + fresh
            st[PENDING], st[PENDING_SEEN], st[PENDING_QUERIES] = 1, seen, queries
            return ROOM, ck, cw
        st[RAN] += 1
        st[QUERIES] += queries
        st[GATHERED] += seen
        for i in range(m):  # facts never seen: the next ids, in the hash index
            if ids[i] < 0:
                f = n_ids0 + m_new
                m_new += 1
                s = hash_slot(ck[i], bits)
                while tk[s] >= 0:
                    s = (s + 1) & mask
                tk[s] = ck[i]
                tv[s] = f
                ids[i] = f
        st[M_NEW] = m_new
        st[HASH_N] = h_n + fresh
        slots = np.empty(m, np.int64)
        n, g_n = touch(ids, ck, cw, t, slot, depth, ndepth, bstart, blen, pool_t, pool_w, n,
                       t_ids, t_keys, t_old, t_new, t_dec, t_dr, t_gstart, t_glen, t_gnext,
                       t_rold, g_n, g_t, g_w, slots)
        for i in range(m):
            log_s[log_n + i] = slots[i]
            log_t[log_n + i] = t
            log_w[log_n + i] = cw[i]
        st[N], st[G_N], st[LOG_N] = n, g_n, log_n + m
        decide(t, n, t_ids, t_new, t_dec, t_dr, t_rold, t_gstart, t_glen, t_gnext, g_t, g_w,
               ndepth)
        # Δδo[t] (as ``kernels.changed_at``), and the touched facts at depth t
        k = 0
        came = 0
        went = 0
        for s in range(n):
            a = t_old[s] == t
            b = t_new[s] == t
            if a != b:
                last_s[k] = s
                last_w[k] = 1 if b else -1
                k += 1
            if b:
                came += 1
            elif a:
                went += 1
        st[LAST_N] = k
        size_t = (hist[t] if t < hist.shape[0] else 0) + came - went
        if t + 1 > max_birth_old and not size_t:
            return DONE, pend_k[:0], pend_w[:0]
        t += 1
        if not k:  # o[t-1] = o[t-2]: maybe nothing changes at t
            best = next_event(t, n, t_old, t_dec, t_gstart, t_glen, t_gnext, g_t)
            if best > t and has_e:
                at = _next_depth(start, t - 1)
                if at >= 0:
                    best = min(best, at + 1)
            if best == NONE:
                st[T] = t
                return DONE, pend_k[:0], pend_w[:0]
            st[SKIPPED] += best - t
            t = best
        st[T] = t


def warm() -> None:
    """Compile (or load from numba's cache) the loop for the types the columnar kernel
    passes."""
    i64, i32 = np.zeros(4, np.int64), np.zeros(4, np.int32)
    e64, e32 = i64[:0].copy(), i32[:0].copy()
    st = np.zeros(FIELDS, np.int64)
    tk = np.full(1024, -1, np.int64)
    dec = np.zeros(4, np.bool_)
    linear_loop(st, e64, e64, 0, e64, e64, e64, e64, e64, e64, e64, e64, e64, 0, True,
                e64, e64, e32, tk, np.zeros(1024, np.int64), 10, i32.copy(), i32.copy(),
                np.full(4, -1, np.int64), i64.copy(), i64.copy(), i32.copy(), i64.copy(), 0,
                e64, -1, i64.copy(), i64.copy(), i32.copy(), i32.copy(), dec, i64.copy(),
                i64.copy(), i64.copy(), i64.copy(), i64.copy(), i32.copy(), i64.copy(),
                i64.copy(), i32.copy(), i64.copy(), i64.copy(), i64.copy(), e64, e64)
