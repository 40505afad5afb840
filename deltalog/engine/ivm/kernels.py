"""The compiled leapfrog triejoin of a commit (Veldhuizen 2014, §4): a rule body over one
version of its relations, restricted to the change oracle, recording the sensitivity
interval of every iterator operation when asked. Compiled by numba, cached beside this
file.

An atom reads a version as three sorted code arrays (``deltalog.engine.columnar.versions``):
``base − minus ∪ plus``. Its trie iterator keeps a position in each; a key of base whose
rows under the bound prefix are all in minus is skipped (the counts of the two runs are
equal: minus is a subset of base), and a key is the least of base's and plus's. A version
is therefore read in place, whatever the overlay, and a commit never copies a relation.

The oracle is a trie flattened into arrays: node i's segments are ``o_start[i]`` to
``o_end[i]`` (sorted, disjoint), each [``o_lo``, ``o_hi``] with ``o_child`` the node that
restricts the next level, or -1 when everything below the segment is in the oracle
(``deltalog.engine.ivm.oracle``); node 0 is the root, and no nodes at all mean no oracle.
At a restricted level the leapfrog starts at the first segment's low end and, whenever
its target passes a segment's high end, moves to the next segment that can hold it (to
its low end, when the target lies below it).

Recording follows ``deltalog.engine.columnar.kernels.lftj``: a seek to t landing on k (or
the end: ``TOP``) gives [t, k], moving past v to k gives [v, k], a level's opens give
(−inf, k] for the atom whose first key k is the greatest and [k, k] for the others on k,
and (−inf, +inf) for the first atom with no key there; inside a region that starts at
lo > −inf the opens are seeks to lo instead, recorded even when they land at the end
(the intervals below lo stay in the index from earlier evaluations). Rows of ``rec``:
(slot, lo, hi, the values of the earlier levels).
"""

import numpy as np
from numba import njit

from deltalog.engine.columnar.kernels import (
    BOT,
    C_EMITS,
    C_NEXTS,
    C_OPENS,
    C_SEEKS,
    JOIN,
    TOP,
    _compare,
    _gallop,
    _given,
    _grown,
    _note,
    _past,
)


@njit(cache=True, nogil=True, inline="always")
def _settle(b, m, p, d, pb, pm, pp, bh, mh, ph):
    """Positions past the keys of ``b`` whose rows are all in ``m``; (pb, pm, pp, key,
    whether there is a key)."""
    kb = 0
    has_b = False
    while pb < bh:
        kb = b[pb, d]
        if pm < mh:
            pm = _gallop(m, d, pm, mh, kb)
            if pm < mh and m[pm, d] == kb:
                eb = _past(b, d, pb + 1, bh, kb)
                em = _past(m, d, pm + 1, mh, kb)
                if eb - pb == em - pm:
                    pb = eb
                    pm = em
                    continue
        has_b = True
        break
    if pp < ph:
        kp = p[pp, d]
        if has_b:
            return pb, pm, pp, min(kb, kp), True
        return pb, pm, pp, kp, True
    return pb, pm, pp, kb, has_b


@njit(cache=True, nogil=True)
def lftj_versions(rb, rm, rp, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
                  chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv, out_levels, exist_level,
                  counters, o_start, o_end, o_lo, o_hi, o_child, slot_rec, rec):
    """The join, recording when ``rec`` has rows (compiled twice, as ``kernels.lftj``)."""
    if rec.shape[0] > 0:
        return _lftj_versions(rb, rm, rp, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
                              chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv, out_levels,
                              exist_level, counters, o_start, o_end, o_lo, o_hi, o_child,
                              slot_rec, rec, True)
    return _lftj_versions(rb, rm, rp, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
                          chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv, out_levels,
                          exist_level, counters, o_start, o_end, o_lo, o_hi, o_child,
                          slot_rec, rec, False)


@njit(cache=True, nogil=True, inline="always")
def _lftj_versions(rb, rm, rp, lev_kind, lev_arg, lev_ptr, slot_atom, slot_depth,
                   chk_ptr, chk_op, chk_lk, chk_lv, chk_rk, chk_rv, out_levels, exist_level,
                   counters, o_start, o_end, o_lo, o_hi, o_child, slot_rec, rec, record):
    """Every binding of the levels (as ``kernels.lftj`` plans them: JOIN, CONST, COPY and
    conversion levels, checks per level, existential levels from ``exist_level``) inside the oracle,
    projected on ``out_levels``. Returns (rows, n, records, their number)."""
    rn = 0
    nlev = lev_kind.shape[0]
    nslots = slot_atom.shape[0]
    natoms = len(rb)
    maxd = 1
    for s in range(nslots):
        if slot_depth[s] + 2 > maxd:
            maxd = slot_depth[s] + 2
    # Ranges per atom and depth in each of its three arrays: the rows under the prefix.
    blo = np.zeros((natoms, maxd), np.int64)
    bhi = np.zeros((natoms, maxd), np.int64)
    mlo = np.zeros((natoms, maxd), np.int64)
    mhi = np.zeros((natoms, maxd), np.int64)
    plo = np.zeros((natoms, maxd), np.int64)
    phi = np.zeros((natoms, maxd), np.int64)
    for a in range(natoms):
        bhi[a, 0] = rb[a].shape[0]
        mhi[a, 0] = rm[a].shape[0]
        phi[a, 0] = rp[a].shape[0]
    pb = np.zeros(nslots, np.int64)
    pm = np.zeros(nslots, np.int64)
    pp = np.zeros(nslots, np.int64)
    key = np.zeros(nslots, np.int64)
    has = np.zeros(nslots, np.bool_)
    val = np.zeros(max(nlev, 1), np.int64)
    node = np.full(nlev + 1, -1, np.int64)
    seg = np.zeros(nlev + 1, np.int64)
    if o_start.shape[0] > 0:
        node[0] = 0
    nout = out_levels.shape[0]
    out = np.empty((1024, nout), np.int64)
    n = 0
    if nlev == 0:
        return out, 1, rec, 0
    L = 0
    entering = True
    while True:
        s0 = lev_ptr[L]
        s1 = lev_ptr[L + 1]
        kind = lev_kind[L]
        nd = node[L]
        found = False
        v = 0
        if kind == JOIN:
            done = False
            if entering:
                counters[C_OPENS] += 1
                for s in range(s0, s1):
                    a = slot_atom[s]
                    d = slot_depth[s]
                    pb[s], pm[s], pp[s], key[s], has[s] = _settle(
                        rb[a], rm[a], rp[a], d, blo[a, d], mlo[a, d], plo[a, d],
                        bhi[a, d], mhi[a, d], phi[a, d])
                lo = BOT
                if nd >= 0:
                    seg[L] = o_start[nd]
                    if seg[L] >= o_end[nd]:
                        done = True
                    else:
                        lo = o_lo[seg[L]]
                if done:
                    pass
                elif lo == BOT:
                    for s in range(s0, s1):
                        if not has[s]:
                            if record and slot_rec[s]:
                                rn = _note(rec, rn, s, BOT, TOP, val, L)
                            done = True
                            break
                    if not done and record:
                        best = s0
                        for s in range(s0, s1):
                            if key[s] > key[best]:
                                best = s
                        for s in range(s0, s1):
                            if not slot_rec[s]:
                                continue
                            if s == best:
                                rn = _note(rec, rn, s, BOT, key[s], val, L)
                            elif key[s] == key[best]:
                                rn = _note(rec, rn, s, key[s], key[s], val, L)
                else:
                    for s in range(s0, s1):
                        a = slot_atom[s]
                        d = slot_depth[s]
                        counters[C_SEEKS] += 1
                        pb[s], pm[s], pp[s], key[s], has[s] = _settle(
                            rb[a], rm[a], rp[a], d, _gallop(rb[a], d, pb[s], bhi[a, d], lo),
                            pm[s], _gallop(rp[a], d, pp[s], phi[a, d], lo),
                            bhi[a, d], mhi[a, d], phi[a, d])
                        if record and slot_rec[s]:
                            rn = _note(rec, rn, s, lo, key[s] if has[s] else TOP, val,
                                       L)
                        if not has[s]:
                            done = True
                            break
            else:
                # Past the current value: every atom's positions past its run.
                counters[C_NEXTS] += 1
                w = val[L]
                for s in range(s0, s1):
                    a = slot_atom[s]
                    d = slot_depth[s]
                    pb[s], pm[s], pp[s], key[s], has[s] = _settle(
                        rb[a], rm[a], rp[a], d, _past(rb[a], d, pb[s], bhi[a, d], w),
                        pm[s], _past(rp[a], d, pp[s], phi[a, d], w),
                        bhi[a, d], mhi[a, d], phi[a, d])
                    if record and slot_rec[s]:
                        rn = _note(rec, rn, s, w, key[s] if has[s] else TOP, val, L)
                    if not has[s]:
                        done = True
            target = 0
            if not done:
                target = key[s0]
                for s in range(s0, s1):
                    if key[s] > target:
                        target = key[s]
            while not done:
                if nd >= 0 and target > o_hi[seg[L]]:
                    g = seg[L] + 1
                    while g < o_end[nd] and o_hi[g] < target:
                        g += 1
                    seg[L] = g
                    if g >= o_end[nd]:
                        done = True
                        break
                    if target < o_lo[g]:
                        target = o_lo[g]
                agreed = True
                for s in range(s0, s1):
                    if key[s] < target:
                        a = slot_atom[s]
                        d = slot_depth[s]
                        counters[C_SEEKS] += 1
                        pb[s], pm[s], pp[s], key[s], has[s] = _settle(
                            rb[a], rm[a], rp[a], d,
                            _gallop(rb[a], d, pb[s], bhi[a, d], target),
                            pm[s], _gallop(rp[a], d, pp[s], phi[a, d], target),
                            bhi[a, d], mhi[a, d], phi[a, d])
                        if record and slot_rec[s]:
                            rn = _note(rec, rn, s, target, key[s] if has[s] else TOP,
                                       val, L)
                        if not has[s]:
                            done = True
                            break
                    if key[s] > target:
                        target = key[s]
                        agreed = False
                        break
                if done:
                    break
                if agreed:
                    found = True
                    v = target
                    break
        elif entering:
            found, v = _given(kind, lev_arg[L], val, counters)
            if found and nd >= 0:
                g = o_start[nd]
                e = o_end[nd]
                while g < e:  # the first segment whose high end reaches v
                    mid = (g + e) >> 1
                    if o_hi[mid] < v:
                        g = mid + 1
                    else:
                        e = mid
                if g >= o_end[nd] or o_lo[g] > v:
                    found = False
                seg[L] = g
            if found:
                for s in range(s0, s1):
                    a = slot_atom[s]
                    d = slot_depth[s]
                    counters[C_SEEKS] += 1
                    pb[s], pm[s], pp[s], key[s], has[s] = _settle(
                        rb[a], rm[a], rp[a], d,
                        _gallop(rb[a], d, blo[a, d], bhi[a, d], v), mlo[a, d],
                        _gallop(rp[a], d, plo[a, d], phi[a, d], v),
                        bhi[a, d], mhi[a, d], phi[a, d])
                    if record and slot_rec[s]:
                        rn = _note(rec, rn, s, v, key[s] if has[s] else TOP, val, L)
                    if not has[s] or key[s] != v:
                        found = False
                        break
        if not found:
            L -= 1
            entering = False
            if L < 0:
                break
            continue
        val[L] = v
        node[L + 1] = o_child[seg[L]] if nd >= 0 else -1
        # The children's ranges: the rows of v in each of an atom's arrays.
        for s in range(s0, s1):
            a = slot_atom[s]
            d = slot_depth[s]
            b = rb[a]
            x = pb[s]
            if x < bhi[a, d] and b[x, d] == v:
                blo[a, d + 1] = x
                bhi[a, d + 1] = _past(b, d, x + 1, bhi[a, d], v)
            else:
                blo[a, d + 1] = x
                bhi[a, d + 1] = x
            mm = rm[a]
            x = _gallop(mm, d, pm[s], mhi[a, d], v)
            mlo[a, d + 1] = x
            mhi[a, d + 1] = _past(mm, d, x, mhi[a, d], v)
            q = rp[a]
            x = pp[s]
            if x < phi[a, d] and q[x, d] == v:
                plo[a, d + 1] = x
                phi[a, d + 1] = _past(q, d, x + 1, phi[a, d], v)
            else:
                plo[a, d + 1] = x
                phi[a, d + 1] = x
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


@njit(cache=True, nogil=True)
def build_oracle(plen, vals, lo, hi):
    """The change oracle of regions as the flat trie ``lftj_versions`` reads (see the
    module): region r fixes the first ``plen[r]`` levels to ``vals[r, :plen[r]]`` and
    gives [lo[r], hi[r]] on the next (``deltalog.engine.ivm.oracle.ChangeOracle.add``, on
    codes). At each node the intervals are merged (overlapping or sharing an end), and a
    fixed value deeper regions go through is a point segment with a child node unless a
    merged interval holds it (everything below is in the oracle then).
    Returns (o_start, o_end, o_lo, o_hi, o_child)."""
    r_n = plen.shape[0]
    e = vals.shape[1]
    keys = np.empty((r_n, e + 1), np.int64)
    for r in range(r_n):
        for j in range(e):
            keys[r, j] = vals[r, j] if j < plen[r] else BOT
        keys[r, e] = lo[r]
    order = np.arange(r_n)
    if r_n > 1:
        # a lexicographic sort: stable sorts from the last key to the first
        for j in range(e, -1, -1):
            col = keys[order, j]
            order = order[np.argsort(col, kind="mergesort")]
    keys = keys[order]
    his = hi[order]
    cap = r_n * (e + 1) + 2
    q_a = np.empty(r_n * (e + 1) + 1, np.int64)
    q_b = np.empty(r_n * (e + 1) + 1, np.int64)
    q_l = np.empty(r_n * (e + 1) + 1, np.int64)
    o_start = np.empty(r_n * (e + 1) + 1, np.int64)
    o_end = np.empty(r_n * (e + 1) + 1, np.int64)
    o_lo = np.empty(cap, np.int64)
    o_hi = np.empty(cap, np.int64)
    o_child = np.empty(cap, np.int64)
    ml = np.empty(r_n + 1, np.int64)
    mh = np.empty(r_n + 1, np.int64)
    q_a[0] = 0
    q_b[0] = r_n
    q_l[0] = 0
    qn = 1
    sn = 0
    i = 0
    while i < qn:
        a = q_a[i]
        b = q_b[i]
        level = q_l[i]
        # The node's own intervals: the regions that fix no more levels.
        a2 = a
        if level >= e:
            a2 = b
        else:
            while a2 < b and keys[a2, level] == BOT:
                a2 += 1
        nm = 0
        for r in range(a, a2):
            x = keys[r, e]
            y = his[r]
            if nm > 0 and x <= mh[nm - 1]:
                if y > mh[nm - 1]:
                    mh[nm - 1] = y
            else:
                ml[nm] = x
                mh[nm] = y
                nm += 1
        o_start[i] = sn
        k = 0
        r = a2
        while r < b or k < nm:
            # the next child group's value, if any
            v = 0
            g_end = r
            if r < b:
                v = keys[r, level]
                g_end = r + 1
                while g_end < b and keys[g_end, level] == v:
                    g_end += 1
            if r < b and (k >= nm or v < ml[k]):
                o_lo[sn] = v
                o_hi[sn] = v
                o_child[sn] = qn
                q_a[qn] = r
                q_b[qn] = g_end
                q_l[qn] = level + 1
                qn += 1
                sn += 1
                r = g_end
            elif r < b and v <= mh[k]:
                r = g_end  # inside the interval: its subtree is in the oracle already
            else:
                o_lo[sn] = ml[k]
                o_hi[sn] = mh[k]
                o_child[sn] = -1
                sn += 1
                k += 1
        o_end[i] = sn
        i += 1
    return o_start[:qn], o_end[:qn], o_lo[:sn], o_hi[:sn], o_child[:sn]


@njit(cache=True, nogil=True, inline="always")
def _under(a, row, d):
    """How many rows of sorted ``a`` share the first d + 1 values of ``row``."""
    lo = 0
    hi = a.shape[0]
    for c in range(d + 1):  # narrow [lo, hi) column by column (earlier ones equal)
        v = row[c]
        lo = _gallop(a, c, lo, hi, v)
        hi = _past(a, c, lo, hi, v)
        if lo >= hi:
            return 0
    return hi - lo


@njit(cache=True, nogil=True)
def absent_depths(b, m, p, rows):
    """For each row of ``rows`` (codes, the index's column order), the shallowest depth
    whose prefix the version ``b − m ∪ p`` lacks (the row's width when it holds the
    row): where the tree surgery of a changed row starts (Veldhuizen 2014, §4.2.1)."""
    n, k = rows.shape
    out = np.empty(n, np.int64)
    for i in range(n):
        row = rows[i]
        d = 0
        while d < k and _under(b, row, d) - _under(m, row, d) + _under(p, row, d) > 0:
            d += 1
        out[i] = d
    return out
