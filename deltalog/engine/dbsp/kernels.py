"""Compiled loops of the columnar DBSP kernel (``deltalog.engine.dbsp.columnar``): the steps that
walk the touched facts one at a time, where whole-array numpy would make a pass (and a
temporary array) per field. Each kernel is a plain loop over arrays it is given; the
caller owns every array and makes room before the call. Compiled by numba (``warm``,
when a columnar stratum is built or loaded) and cached beside this file.

Conventions: ids index a relation's by-id arrays (depth, ndepth, slot, bstart, blen);
slots index the arrays of one commit's touched facts (ids, old, new, decided, dr, r_old,
and their gathered old births: gstart, glen, gnext into g_t, g_w).
"""

import numpy as np
from numba import njit

from deltalog.engine import pages
from deltalog.engine.pages import lower_in

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
NONE = np.int32(2**31 - 1)


@njit(cache=True, nogil=True, inline="always")
def hash_slot(key, bits):
    return np.int64((np.uint64(key) * GOLDEN) >> np.uint64(64 - bits))


@njit(cache=True, nogil=True)
def hash_insert(tk, tv, bits, keys, ids):
    """Add keys that are not there (distinct) with their ids: linear probing."""
    mask = len(tk) - 1
    for i in range(len(keys)):
        s = hash_slot(keys[i], bits)
        while tk[s] >= 0:
            s = (s + 1) & mask
        tk[s] = keys[i]
        tv[s] = ids[i]


@njit(cache=True, nogil=True, inline="always")
def hash_probe(tk, tv, bits, k):
    """The id of key k (-1: not there; a negative k never is)."""
    mask = len(tk) - 1
    s = hash_slot(k, bits)
    while tk[s] >= 0:
        if tk[s] == k:
            return tv[s]
        s = (s + 1) & mask
    return -1


@njit(cache=True, nogil=True)
def hash_get(tk, tv, bits, keys, out):
    """out[i]: the id of keys[i] (-1: not there)."""
    for i in range(len(keys)):
        out[i] = hash_probe(tk, tv, bits, keys[i])


@njit(cache=True, nogil=True)
def pair_get(tk, tv, bits, a, b, out):
    """out[i]: the id of the pair (a[i], b[i]) (-1: not there, or a part is -1)."""
    for i in range(len(a)):
        ok = a[i] >= 0 and b[i] >= 0
        out[i] = hash_probe(tk, tv, bits, (a[i] << 32) | b[i]) if ok else -1


@njit(cache=True, nogil=True)
def touch(ids, keys, w, t, slot, depth, ndepth, bstart, blen, pool_t, pool_w, n,
          t_ids, t_keys, t_old, t_new, t_dec, t_dr, t_gstart, t_glen, t_gnext, t_rold,
          g_n, g_t, g_w, slots):
    """Δc[t] (facts ``ids`` with ``keys``, distinct, and counts ``w``) added to the
    touched facts: a fact touched the first time takes the next slot (n on), its old
    depth, its new one (a member before t stays one at its depth; the others are
    undecided) and its old births (its pool slice, appended to the gathered ones, none
    in r_old yet: ``decide`` takes them in as t reaches them). ``slots[i]``: fact i's
    slot. Returns the new counts of slots and of gathered births."""
    for i in range(ids.shape[0]):
        f = ids[i]
        s = slot[f]
        if s < 0:
            s = n
            n += 1
            d_old = depth[f]
            member = d_old <= t - 1
            d_new = d_old if member else NONE
            t_ids[s] = f
            t_keys[s] = keys[i]
            t_old[s] = d_old
            t_new[s] = d_new
            t_dec[s] = member
            t_dr[s] = 0
            slot[f] = s
            ndepth[f] = d_new
            t_gstart[s] = g_n
            t_glen[s] = blen[f]
            t_gnext[s] = g_n
            t_rold[s] = 0
            for j in range(bstart[f], bstart[f] + blen[f]):
                g_t[g_n] = pool_t[j]
                g_w[g_n] = pool_w[j]
                g_n += 1
        t_dr[s] += w[i]
        slots[i] = s
    return n, g_n


@njit(cache=True, nogil=True)
def changed_at(t, n, old, new, idx, w, idx_eq, w_eq):
    """After ↑↑H at iteration t: the slots whose membership in o[t] (depth ≤ t) changed
    (``idx``, with ``w`` +1 in, -1 out) and those whose membership in δo[t] (depth t)
    changed (``idx_eq``, ``w_eq``: Δδo[t] = Δo[t] - Δo[t-1]). Returns how many of each,
    and how many of the touched facts came to depth t and left it."""
    k = 0
    k_eq = 0
    came = 0
    went = 0
    for s in range(n):
        a = old[s] <= t
        b = new[s] <= t
        if a != b:
            idx[k] = s
            w[k] = 1 if b else -1
            k += 1
        a = old[s] == t
        b = new[s] == t
        if a != b:
            idx_eq[k_eq] = s
            w_eq[k_eq] = 1 if b else -1
            k_eq += 1
        if b:
            came += 1
        elif a:
            went += 1
    return k, k_eq, came, went


@njit(cache=True, nogil=True)
def next_event(t, n, old, dec, gstart, glen, gnext, g_t):
    """The first iteration ≥ t at which a touched fact's membership can change by itself
    (no Δc reaching it): its old depth (o[t] loses or regains it there), or an old birth
    not yet in r_old of an undecided one (``decide`` may take it in there). NONE: none."""
    best = NONE
    for s in range(n):
        if t <= old[s] < best:
            best = old[s]
        if not dec[s]:
            c = gnext[s]
            if c < gstart[s] + glen[s] and g_t[c] < best:
                best = g_t[c]
    return best


@njit(cache=True, nogil=True)
def view_depths(first, k0, i0, k1, i1, k2, i2, depth):
    """The depths (``depth`` by id: ``i0``... the ids of a part's rows, or their positions
    when empty) of the rows of three sorted parts whose high half is a code of ``first``,
    but NONE (tombstones)."""
    n = first.shape[0]
    total = 0
    for i in range(n):
        a = first[i] << 32
        b = (first[i] + 1) << 32
        total += _lower(k0, b) - _lower(k0, a) + _lower(k1, b) - _lower(k1, a)
        total += _lower(k2, b) - _lower(k2, a)
    out = np.empty(total, np.int32)
    m = 0
    for i in range(n):
        a = first[i] << 32
        b = (first[i] + 1) << 32
        m = _depths_in(k0, i0, a, b, depth, out, m)
        m = _depths_in(k1, i1, a, b, depth, out, m)
        m = _depths_in(k2, i2, a, b, depth, out, m)
    return out[:m]


@njit(cache=True, nogil=True)
def _depths_in(keys, ids, a, b, depth, out, m):
    by_id = ids.shape[0] > 0
    for j in range(_lower(keys, a), _lower(keys, b)):
        d = depth[ids[j]] if by_id else depth[j]
        if d != NONE:
            out[m] = d
            m += 1
    return m


@njit(cache=True, nogil=True)
def decide(t, n, t_ids, t_new, t_dec, t_dr, t_rold, t_gstart, t_glen, t_gnext,
           g_t, g_w, ndepth):
    """↑↑H at iteration t: r_old of the undecided facts takes their old births at t; those
    with r_old + Δr > 0 are in o_new[t] (depth t)."""
    for s in range(n):
        if t_dec[s]:
            continue
        c = t_gnext[s]
        end = t_gstart[s] + t_glen[s]
        r = t_rold[s]
        while c < end and g_t[c] <= t:
            r += g_w[c]
            c += 1
        t_rold[s] = r
        t_gnext[s] = c
        if r + t_dr[s] > 0:
            t_new[s] = t
            t_dec[s] = True
            ndepth[t_ids[s]] = t


@njit(cache=True, nogil=True, inline="always")
def _merge_births(n, t_gstart, t_glen, g_t, g_w, log_slot, log_t, log_w, nb_start, nb_len,
                  nb_t, nb_w):
    """The births of each touched slot after the commit: its old births (sorted by t)
    plus its Δc entries (in the order of t, one per t), summed by t, zeros dropped, into
    nb_t/nb_w from nb_start[s] (nb_len[s] entries). Returns False on a negative count."""
    # the log grouped by slot, keeping the order of t (a counting sort)
    cnt = np.zeros(n + 1, np.int64)
    for i in range(len(log_slot)):
        cnt[log_slot[i] + 1] += 1
    for s in range(n):
        cnt[s + 1] += cnt[s]
    at = cnt[:n].copy()
    order = np.empty(len(log_slot), np.int64)
    for i in range(len(log_slot)):
        s = log_slot[i]
        order[at[s]] = i
        at[s] += 1
    out = 0
    ok = True
    for s in range(n):
        nb_start[s] = out
        a, a_end = t_gstart[s], t_gstart[s] + t_glen[s]
        b, b_end = cnt[s], cnt[s + 1]
        while a < a_end or b < b_end:
            if b >= b_end or (a < a_end and g_t[a] < log_t[order[b]]):
                bt, bw = g_t[a], g_w[a]
                a += 1
            elif a >= a_end or log_t[order[b]] < g_t[a]:
                bt, bw = log_t[order[b]], log_w[order[b]]
                b += 1
            else:
                bt, bw = g_t[a], g_w[a] + log_w[order[b]]
                a += 1
                b += 1
            if bw != 0:
                if bw < 0:
                    ok = False
                nb_t[out] = bt
                nb_w[out] = bw
                out += 1
        nb_len[s] = out - nb_start[s]
    return ok


@njit(cache=True, nogil=True)
def _histogram(h, top):
    """A copy of histogram ``h`` with room for values up to ``top``."""
    out = np.zeros(max(h.shape[0], top + 1), np.int64)
    out[: h.shape[0]] = h
    return out


@njit(cache=True, nogil=True)
def trim_zeros(h):
    """``h`` without its trailing zeros."""
    m = h.shape[0]
    while m and h[m - 1] == 0:
        m -= 1
    return h[:m]


# ``commit_births``'s outcomes
BIRTHS_DONE, BIRTHS_ROOM, BIRTHS_NEGATIVE, BIRTHS_MISMATCH = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def commit_births(n, t_ids, t_old, t_new, t_gstart, t_glen, g_t, g_w, g_n, log_s, log_t,
                  log_w, nb_start, nb_len, nb_t, nb_w, hist, bhist, depth, slot, bstart,
                  blen, pool_t, pool_w, pool_n):
    """The end of a commit, in one call: the touched facts' births after it (their old
    births plus the log of Δc, ``_merge_births``, into the scratch nb_*: room for
    g_n + len(log_s) entries), then their new depths become the state (``depth``,
    ``slot`` -1), the histograms follow (``hist``: members by depth; ``bhist``: births by
    t, less the old births gathered, g_t[:g_n], plus the new ones), and each fact's
    births go to the pool: in place when they fit its old slice, else from ``pool_n`` on.

    Returns (hist, bhist, outcome, pool_n, live): ``BIRTHS_DONE`` with the pool's new end
    and the change in live pool entries; ``BIRTHS_ROOM`` when the pool lacks room (pool_n:
    the entries needed past its end); ``BIRTHS_NEGATIVE`` (a negative count) or
    ``BIRTHS_MISMATCH`` (a member without births, or births without membership). Only
    ``BIRTHS_DONE`` changes anything."""
    if not _merge_births(n, t_gstart, t_glen, g_t, g_w, log_s, log_t, log_w, nb_start,
                         nb_len, nb_t, nb_w):
        return hist, bhist, BIRTHS_NEGATIVE, pool_n, 0
    total = nb_start[n - 1] + nb_len[n - 1] if n else 0
    top = -1
    moved = 0
    for s in range(n):
        o, w = t_old[s], t_new[s]
        if (w != NONE) != (nb_len[s] != 0):
            return hist, bhist, BIRTHS_MISMATCH, pool_n, 0
        if o != NONE:
            top = max(top, o)
        if w != NONE:
            top = max(top, w)
            if nb_len[s] > blen[t_ids[s]]:
                moved += nb_len[s]
    if pool_n + moved > pool_t.shape[0]:
        return hist, bhist, BIRTHS_ROOM, moved, 0
    for i in range(total):
        top = max(top, nb_t[i])
    h = _histogram(hist, top)
    bh = _histogram(bhist, top)
    for i in range(g_n):
        bh[g_t[i]] -= 1
    for i in range(total):
        bh[nb_t[i]] += 1
    live = 0
    for s in range(n):
        o, w = t_old[s], t_new[s]
        if o != w:
            if o != NONE:
                h[o] -= 1
            if w != NONE:
                h[w] += 1
        f = t_ids[s]
        depth[f] = w
        slot[f] = -1
        k = nb_len[s]
        live -= t_glen[s]
        if w != NONE:
            if k > blen[f]:
                bstart[f] = pool_n
                pool_n += k
            b0 = bstart[f]
            src = nb_start[s]
            for j in range(k):
                pool_t[b0 + j] = nb_t[src + j]
                pool_w[b0 + j] = nb_w[src + j]
            live += k
        blen[f] = k
    return trim_zeros(h), trim_zeros(bh), BIRTHS_DONE, pool_n, live


@njit(cache=True, nogil=True, inline="always")
def _lower(keys, x):
    """The first position of sorted ``keys`` not below x."""
    return lower_in(keys, x, 0, keys.shape[0])


@njit(cache=True, nogil=True)
def _emit(keys, ids, start, end, i, depth, lo, hi, pkeys, owner, second, out):
    by_id = ids.shape[0] > 0
    check = depth.shape[0] > 0
    shadow = pkeys.shape[0] > 0
    for j in range(start, end):
        if check:
            d = depth[ids[j]] if by_id else depth[j]
            if d < lo or d > hi:
                continue
        if shadow:  # the patch holds this key: its entry decides
            p = _lower(pkeys, keys[j])
            if p < pkeys.shape[0] and pkeys[p] == keys[j]:
                continue
        owner[out] = i
        second[out] = keys[j] & 0xFFFFFFFF
        out += 1
    return out


@njit(cache=True, nogil=True)
def expand(keys, ids, depth, lo, hi, starts, ends, owner, second):
    """Rows keys[starts[i]:ends[i]] whose depth (``depth`` by id: ``ids`` of the rows, or
    the row's position when ``ids`` is empty; every row when ``depth`` is empty) is in
    [lo, hi]: their owner i and second column. Returns how many."""
    out = 0
    no_patch = np.empty(0, np.int64)
    for i in range(len(starts)):
        out = _emit(keys, ids, starts[i], ends[i], i, depth, lo, hi, no_patch, owner, second,
                    out)
    return out


@njit(cache=True, nogil=True)
def view_expand(first, k0, i0, k1, i1, k2, i2, depth, lo, hi, pkeys, pdepth):
    """Every row (first[i], second) of a view (``columnar._View``): its three base parts
    (sorted keys ``k0``, ``k1``, ``k2`` with the ids of their facts, or none: the
    positions), rows whose depth is in [lo, hi] (every row when ``depth`` is empty),
    except the keys the patch (``pkeys`` with depths ``pdepth``) holds, which are there
    when their patch depth is in [lo, hi]. Returns (owner, second, rows looked at)."""
    n = first.shape[0]
    bounds = np.empty((n, 8), np.int64)
    total = 0
    for i in range(n):
        a = first[i] << 32
        b = (first[i] + 1) << 32
        bounds[i, 0] = _lower(k0, a)
        bounds[i, 1] = _lower(k0, b)
        bounds[i, 2] = _lower(k1, a)
        bounds[i, 3] = _lower(k1, b)
        bounds[i, 4] = _lower(k2, a)
        bounds[i, 5] = _lower(k2, b)
        bounds[i, 6] = _lower(pkeys, a)
        bounds[i, 7] = _lower(pkeys, b)
        for j in range(4):
            total += bounds[i, 2 * j + 1] - bounds[i, 2 * j]
    owner = np.empty(total, np.int64)
    second = np.empty(total, np.int64)
    out = 0
    for i in range(n):
        out = _emit(k0, i0, bounds[i, 0], bounds[i, 1], i, depth, lo, hi, pkeys, owner,
                    second, out)
        out = _emit(k1, i1, bounds[i, 2], bounds[i, 3], i, depth, lo, hi, pkeys, owner,
                    second, out)
        out = _emit(k2, i2, bounds[i, 4], bounds[i, 5], i, depth, lo, hi, pkeys, owner,
                    second, out)
        for j in range(bounds[i, 6], bounds[i, 7]):
            if lo <= pdepth[j] <= hi:
                owner[out] = i
                second[out] = pkeys[j] & 0xFFFFFFFF
                out += 1
    return owner[:out], second[:out], total


@njit(cache=True, nogil=True)
def sum_by_key(keys, w):
    """A Z-set from (key, weight) pairs: distinct sorted keys, summed weights, no zeros
    (for a few pairs: one call where numpy takes a dozen)."""
    order = np.argsort(keys)
    out_k = np.empty(keys.shape[0], np.int64)
    out_w = np.empty(keys.shape[0], np.int64)
    m = 0
    for i in order:
        if m > 0 and out_k[m - 1] == keys[i]:
            out_w[m - 1] += w[i]
        else:
            out_k[m] = keys[i]
            out_w[m] = w[i]
            m += 1
    return drop_zeros(out_k, out_w, m)


@njit(cache=True, nogil=True, inline="always")
def drop_zeros(k, v, m):
    """The first ``m`` (key, weight) pairs less those of weight 0, moved down in place:
    (keys, weights)."""
    c = 0
    for i in range(m):
        if v[i] != 0:
            k[c] = k[i]
            v[c] = v[i]
            c += 1
    return k[:c], v[:c]


@njit(cache=True, nogil=True)
def merge_ids(a, ida, b, idb):
    """Sorted keys ``a`` (ids ``ida``) and sorted keys ``b`` (ids ``idb``), none in both,
    merged: (keys, ids)."""
    n = a.shape[0] + b.shape[0]
    keys = np.empty(n, np.int64)
    ids = np.empty(n, np.int64)
    i = 0
    j = 0
    for k in range(n):
        if j == b.shape[0] or (i < a.shape[0] and a[i] < b[j]):
            keys[k] = a[i]
            ids[k] = ida[i]
            i += 1
        else:
            keys[k] = b[j]
            ids[k] = idb[j]
            j += 1
    return keys, ids


_warm = False


def warm() -> None:
    """Compile (or load from the cache) every kernel for the types the columnar kernel
    passes, so that the first commit after a load does not pay for it."""
    global _warm
    if _warm:
        return
    i64, i32 = np.zeros(2, np.int64), np.zeros(2, np.int32)
    tk = np.full(1024, -1, np.int64)
    hash_insert(tk, np.zeros(1024, np.int64), 10, np.arange(2, dtype=np.int64), i64)
    hash_get(tk, np.zeros(1024, np.int64), 10, np.arange(2, dtype=np.int64), i64.copy())
    changed_at(0, 2, i32, i32, i64.copy(), i64.copy(), i64.copy(), i64.copy())
    next_event(0, 0, i32, np.zeros(2, np.bool_), i64, i64, i64, i32)
    for ids in (i64, i64[:0]):
        view_depths(i64, i64, ids, i64[:0], i64[:0], i64[:0], i64[:0], i32)
    pair_get(tk, np.zeros(1024, np.int64), 10, i64, i64, i64.copy())
    sum_by_key(i64, i64)
    gallop(i64, i64, i64.copy())
    overlay(i64, i32, i64, i32)
    trim_patch(i64, i64, i32)
    merge_ids(i64, i64, i64[:0], i64[:0])
    touch(i64[:0], i64[:0], i64[:0], 0, i64.copy(), i32, i32.copy(), i64, i64, i32, i64, 0,
          i64.copy(), i64.copy(), i32.copy(), i32.copy(), np.zeros(2, np.bool_), i64.copy(),
          i64.copy(), i64.copy(), i64.copy(), i64.copy(), 0, i32.copy(), i64.copy(),
          i64[:0].copy())
    decide(0, 0, i64, i32.copy(), np.zeros(2, np.bool_), i64, i64.copy(), i64, i64,
           i64.copy(), i32, i64, i32.copy())
    commit_births(0, i64, i32, i32, i64, i64, i32, i64, 0, i64[:0], i32[:0], i64[:0],
                  i64.copy(), i64.copy(), i32.copy(), i64.copy(), i64, i64, i32.copy(),
                  i64.copy(), i64.copy(), i64.copy(), i32.copy(), i64.copy(), 0)
    trim_zeros(i64)
    expand(i64, i64[:0], i32, 0, 0, i64, i64, i64.copy(), i64.copy())
    expand(i64, i64, i32, 0, 0, i64, i64, i64.copy(), i64.copy())
    expand(i64, i64[:0], i32[:0], 0, 0, i64, i64, i64.copy(), i64.copy())
    for ids in (i64, i64[:0]):
        for depth in (i32, i32[:0]):
            view_expand(i64, i64, ids, i64[:0], i64[:0], i64[:0], i64[:0], depth, 0, 0,
                        i64[:0], i32[:0])
    pages.warm()  # (the store's lookups of the rows this kernel gives it)
    _warm = True


@njit(cache=True, nogil=True)
def overlay(pk, pd, dk, dd):
    """A patch (sorted distinct keys ``pk``, depths ``pd``) with (``dk``, ``dd``), sorted
    and distinct too, laid over it: their entries replace those of the same keys (a
    merge). Sorted."""
    n, m = pk.shape[0], dk.shape[0]
    ok = np.empty(n + m, np.int64)
    od = np.empty(n + m, np.int32)
    i = j = c = 0
    while i < n or j < m:
        if j >= m or (i < n and pk[i] < dk[j]):
            ok[c] = pk[i]
            od[c] = pd[i]
            i += 1
        else:
            if i < n and pk[i] == dk[j]:
                i += 1
            ok[c] = dk[j]
            od[c] = dd[j]
            j += 1
        c += 1
    return ok[:c], od[:c]


@njit(cache=True, nogil=True)
def trim_patch(keys, pk, pd):
    """An input's patch (``pk``, ``pd``: its new version's, ``overlay``) less the entries
    that say what the sorted ``keys`` say already (a key come, depth 0, that they hold; a
    key gone, NONE, that they do not): what the next commit's patch keeps."""
    ok = np.empty(pk.shape[0], np.int64)
    od = np.empty(pk.shape[0], np.int32)
    kept = 0
    for i in range(pk.shape[0]):
        at = lower_in(keys, pk[i], 0, keys.shape[0])
        held = at < keys.shape[0] and keys[at] == pk[i]
        if (pd[i] == 0) != held:
            ok[kept] = pk[i]
            od[kept] = pd[i]
            kept += 1
    return ok[:kept], od[:kept]


@njit(cache=True, nogil=True)
def gallop(a, b, out):
    """out[i]: the position of b[i] in sorted a (the first element ≥ it). Each search
    gallops from the last one's position, so a sorted b costs a merge when dense,
    O(len(a) + len(b)), and a binary search each when sparse; a b[i] below b[i - 1] is
    searched for below the last position."""
    n = len(a)
    lo = 0
    for i in range(len(b)):
        x = b[i]
        if i and x < b[i - 1]:
            lo = lower_in(a, x, 0, lo)
        elif lo < n and a[lo] < x:
            step = 1
            hi = lo + 1
            while hi < n and a[hi] < x:
                lo = hi
                step <<= 1
                hi = lo + step
            # a[lo] < x: the answer is in [lo + 1, min(hi, n)]
            lo = lower_in(a, x, lo + 1, min(hi, n))
        out[i] = lo
