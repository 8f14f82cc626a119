"""Attack s36: session 36's kernels and the join on demand that uses them.

- ``key_index``'s hash-table path (kernels/seek.py distinct_keys) against its sort path, with real 40-bit
  hash collisions built by inverting the hash (equal hash and equal first column, other columns differing),
  keys of no columns, the abort boundary (n // 4 distinct), non-contiguous input.
- IfeOp._rows' per-probe consolidation (normalize_groups) and its ``kh`` shortcut, ``_aggregate``'s one-pass
  min/max (kernels/ife.py extremes): checked *in place* while real dataflows run. Every ``_rows`` call given
  ``kh`` is repeated without it, every ``_aggregate`` is compared with the lexsort code it replaced, every
  ``key_index`` with the sort path (DEDUPE_ROWS lowered so small graphs take the hash path), and every
  mode's output with memory="full" (and networkx) on random insert/delete streams at W = 1, 2, 3.
- multiplicity overflow in ``_rows``' consolidation, and the batcher's split of parts of few times.
"""
from collections import Counter

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from kpgnb.engine import cursor
from kpgnb.engine.batcher import Batcher
from kpgnb.engine.kernels import MAX_MULT
from kpgnb.engine.kernels.seek import distinct_keys
from kpgnb.engine.kernels.sort import hash_keys
from kpgnb.engine.lattice import Antichain
from kpgnb.engine.operators import ife as opi
from test_memory_modes_attack import pagerank_oracle as pagerank_oracle_of

I64 = np.iinfo(np.int64)
ABSENT = I64.min

# -- real 40-bit collisions: the key hash inverted ------------------------------------------------------
from collisions import M64, colliding_last_columns


def _sorted_index(keys):
    saved = cursor.DEDUPE_ROWS
    cursor.DEDUPE_ROWS = 1 << 62
    try:
        return cursor.key_index(keys)
    finally:
        cursor.DEDUPE_ROWS = saved


def _same_index(keys):
    got = cursor.key_index(keys)
    want = _sorted_index(keys)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.array_equal(g, w)
    assert np.array_equal(got[1][:, got[2]], np.asarray(keys))
    return got


def test_collisions_are_real():
    k1 = colliding_last_columns([], 0xABCDE12345, [1, 2, 3])
    assert len(set(hash_keys(np.array([k1], np.int64)).tolist())) == 1
    k2 = colliding_last_columns([7], 0x123456789A, [4, 5, 6, 7])
    keys = np.array([[7] * 4, k2], np.int64)
    assert len(set(hash_keys(keys).tolist())) == 1 and len(set(k2)) == 4


@pytest.mark.parametrize("seed", range(6))
def test_key_index_hash_path_with_40bit_collisions(seed):
    """Many keys of one 40-bit hash and one first column, told apart only by later columns; plus keys
    with the same hash and different first columns; every slot probe chain long."""
    rng = np.random.default_rng(seed)
    kk = [1, 2, 3][seed % 3]
    top = int(rng.integers(0, 1 << 40))
    pool = []
    if kk == 1:
        pool = [[v] for v in colliding_last_columns([], top, range(1, 200))]
    else:
        for k0 in (5, -9):  # equal first column, colliding hashes
            pre = [k0] + [int(rng.integers(-3, 3)) for _ in range(kk - 2)]
            pool += [pre + [v] for v in colliding_last_columns(pre, top, range(1, 120))]
    pool += [[int(x) for x in rng.integers(I64.min, I64.max, kk, dtype=np.int64)] for _ in range(150)]
    pool = np.array(pool, np.int64).T
    d = pool.shape[1]
    for n in (4096, 4 * d, 4 * d - 1, 4 * d + 1, 20_000):
        n = max(n, 4096)
        idx = rng.integers(0, d, n)
        idx[:d] = rng.permutation(d) if n >= d else idx[:d]
        keys = np.ascontiguousarray(pool[:, idx])
        _same_index(keys)
        if kk > 1:  # a non-contiguous view of the same columns (key_index copies it)
            wide = np.zeros((kk, 2 * n), np.int64)
            wide[:, ::2] = keys
            _same_index(wide[:, ::2])


def test_distinct_keys_limit_boundary():
    rng = np.random.default_rng(3)
    for d in (1023, 1024, 1025, 2047, 2048, 2049):
        n = 4 * d if d >= 1024 else 4096
        pool = rng.integers(-50_000, 50_000, (2, d)).astype(np.int64)
        pool[1] = np.arange(d)  # distinct
        keys = np.ascontiguousarray(pool[:, np.r_[np.arange(d), rng.integers(0, d, n - d)]])
        firsts, inv, got = distinct_keys(keys, n // 4)
        if d <= n // 4:
            assert got == d and np.array_equal(keys[:, firsts][:, inv], keys)
            assert np.array_equal(firsts, np.arange(d))  # first appearances, in order
        else:
            assert got == -1
        _same_index(keys)


@pytest.mark.parametrize("n", [4095, 4096, 10_000])
def test_key_index_no_columns(n):
    got = _same_index(np.zeros((0, n), np.int64))
    assert got[1].shape == (0, 1) and (got[2] == 0).all()


def test_key_index_int64_extremes():
    rng = np.random.default_rng(9)
    vals = np.array([I64.min, I64.min + 1, -1, 0, 1, I64.max - 1, I64.max], np.int64)
    for kk in (1, 2, 3):
        keys = np.ascontiguousarray(vals[rng.integers(0, len(vals), (kk, 9000))])
        _same_index(keys)


# -- IfeOp instrumented: each shortcut checked against the code it replaced -----------------------------
def _old_aggregate(spec, n, q, v, c):
    """engine/operators/ife.py _aggregate as of e2d970f (lexsort)."""
    out = np.full(n, ABSENT, np.int64)
    if spec.agg == "sum":
        nz = c != 0
        q, v, c = q[nz], v[nz], c[nz]
    else:
        pos = c > 0
        q, v = q[pos], v[pos]
    if not len(q):
        return out
    fl = spec.value_float
    if spec.agg == "sum" and fl:
        return opi.IfeOp._float_sums(out, q, v, c)
    x = v.view(np.float64) if fl else v
    order = np.lexsort((x, q))
    q, x = q[order], x[order]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    if spec.agg == "sum":
        agg = opi._exact_sums(x, c[order], starts, 1 << 63, opi._sum_overflow)
    elif spec.agg == "min":
        agg = x[starts]
    else:
        agg = x[np.r_[starts[1:], len(x)] - 1]
    if fl:
        agg = (np.asarray(agg, np.float64) + 0.0).view(np.int64)
    out[q[starts]] = agg
    return out


def _old_rows(self, port, keys, at):
    """engine/operators/ife.py _rows as of e2d970f (lexsort consolidation)."""
    side = self.sides[port]
    kv = side.kv
    n = keys.shape[1]
    if not n:
        return np.zeros(0, np.int64), np.zeros((kv, 0), np.int64), np.zeros(0, np.int64)
    pkh, pkeys, inv = _sorted_index(keys)
    batches = [b for s in range(self.workers) for b in side.history(s)]
    h = cursor.Cursor(batches, kv, 1).seek(pkh, pkeys)
    probe = np.repeat(np.arange(len(pkh)), np.diff(h.off))
    sel = h.times[:, 0] <= at
    probe, vals, diffs = probe[sel], h.vals[:, sel], h.diffs[sel]
    if len(diffs):
        order = np.lexsort(tuple(vals[i] for i in range(kv - 1, -1, -1)) + (probe,))
        probe, vals, diffs = probe[order], vals[:, order], diffs[order]
        new = np.ones(len(diffs), bool)
        new[1:] = (probe[1:] != probe[:-1]) | (vals[:, 1:] != vals[:, :-1]).any(axis=0)
        starts = np.flatnonzero(new)
        tot = [sum(int(x) for x in diffs[a:b]) for a, b in zip(starts, np.r_[starts[1:], len(diffs)])]
        if any(abs(t) >= MAX_MULT for t in tot):
            raise OverflowError("multiplicity")
        probe, vals, diffs = probe[starts], vals[:, starts], np.array(tot, np.int64)
        nz = diffs != 0
        probe, vals, diffs = probe[nz], vals[:, nz], diffs[nz]
    poff = np.zeros(len(pkh) + 1, np.int64)
    np.cumsum(np.bincount(probe, minlength=len(pkh)), out=poff[1:])
    lens = np.diff(poff)[inv]
    q = np.repeat(np.arange(n), lens)
    rows = np.arange(len(q)) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(poff[:-1][inv], lens)
    return q, vals[:, rows], diffs[rows]


@pytest.fixture
def checked(monkeypatch):
    """Every _rows, _aggregate and key_index of the IFE operator compared with the replaced code; key_index
    takes its hash path from 8 columns on. Yields the call counts (to see each path was taken)."""
    counts = Counter()
    monkeypatch.setattr(cursor, "DEDUPE_ROWS", 8)
    rows, aggregate, key_index = opi.IfeOp._rows, opi.IfeOp._aggregate, opi.key_index

    def ki(keys):
        got = key_index(keys)
        want = _sorted_index(keys)
        counts["key_index"] += 1
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.array_equal(g, w), "key_index: hash path differs from the sort path"
        return got

    def checked_rows(self, port, keys, at, kh=None):
        got = rows(self, port, keys, at, kh)
        if kh is not None:  # the shortcut's promise: the keys distinct, in arrangement order, kh theirs
            counts["rows_kh"] += 1
            pkh, pkeys, _ = _sorted_index(np.ascontiguousarray(keys))
            assert np.array_equal(pkh, kh) and np.array_equal(pkeys, keys), "_rows given kh of unordered keys"
        q, vals, diffs = _old_rows(self, port, np.ascontiguousarray(keys), at)
        counts["rows"] += 1
        assert np.array_equal(got.q, q) and np.array_equal(got.vals, vals) and np.array_equal(got.counts, diffs), \
            f"_rows(port {port}, kh={kh is not None}) differs from the lexsort consolidation"
        return got

    def checked_aggregate(self, n, q, v, c):
        got = aggregate(self, n, q, v, c)
        want = _old_aggregate(self.spec, n, q, v, c)
        counts["aggregate"] += 1
        assert np.array_equal(got, want), f"_aggregate ({self.spec.agg}) differs from the lexsort code"
        return got

    monkeypatch.setattr(opi, "key_index", ki)
    monkeypatch.setattr(opi.IfeOp, "_rows", checked_rows)
    monkeypatch.setattr(opi.IfeOp, "_aggregate", checked_aggregate)
    yield counts


MODES = {
    "jod": ("jod", None),
    "det": ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=1)),
    "bloom": ("drop", kp.Drop(p=0.5, policy="random", tracker="bloom", bloom_bits=64)),
    "all": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
}


def _read(view, cols, at=None):
    df = view.to_pandas(at=at)
    return sorted(tuple(r) for r in df[cols].itertuples(index=False, name=None))


def _close(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            if isinstance(p, float) or isinstance(q, float):
                if not (p == q or abs(p - q) <= 1e-9 * max(1.0, abs(p), abs(q))):
                    return False
            elif p != q:
                return False
    return True


def run_stream(workers, seed, build, cols, oracle=None, *, n=14, m=40, epochs=6, weighted=True,
               sources=True, approx=False, modes=MODES, nsrc=2):
    """A random multigraph (duplicate edges: multiplicity 2+) and a random stream of insertions and
    deletions (and weight changes); every mode against full at every epoch, full against the oracle."""
    rng = np.random.default_rng(seed)
    eng = kp.Engine(workers=workers)
    try:
        E = eng.input("edges", ["src", "dst", "w"] if weighted else ["src", "dst"])
        S = eng.input("sources", ["source"]) if sources else None
        live = Counter()

        def edge():
            a, b = (int(x) for x in rng.integers(0, n, 2))
            return (a, b, int(rng.integers(1, 6))) if weighted else (a, b)
        first = [edge() for _ in range(m)]
        E.insert(first)
        live.update(first)
        first_srcs = [0, 3] if nsrc == 2 else sorted({int(x) for x in rng.integers(0, n + 2, nsrc)})
        srcs = Counter({x: 1 for x in first_srcs})
        if S is not None:
            S.insert([(x,) for x in first_srcs])
        views = {}
        for label, (memory, drop) in {"full": ("full", None), **modes}.items():
            with eng.dataflow(label) as df:
                views[label] = build(df, memory, drop).view("out")
        for ep in range(1, epochs + 1):
            E.advance_to(ep)
            if S is not None:
                S.advance_to(ep)
            for v in views.values():
                eng.wait(v, timeout=120)
            full = _read(views["full"], cols)
            for label, v in views.items():
                got = _read(v, cols)
                assert (_close(got, full) if approx else got == full), \
                    (f"seed {seed} W={workers} epoch {ep}: {label} differs from full: only {label} "
                     f"{sorted(set(got) - set(full))[:5]}, only full {sorted(set(full) - set(got))[:5]}")
            if oracle is not None:
                want = oracle(live, srcs)
                assert _close(full, want), f"epoch {ep}: full differs from the oracle"
            # changes: deletions (of present edges, sometimes all copies), insertions, duplicates
            k = int(rng.choice([1, 2, 5, 15]))
            ins, rem = [], []
            for _ in range(k):
                r = rng.random()
                present = [e for e, c in live.items() if c > 0]
                if present and r < 0.45:
                    e = present[int(rng.integers(len(present)))]
                    rem += [e] * (live[e] if rng.random() < 0.5 else 1)
                elif present and r < 0.6:
                    ins.append(present[int(rng.integers(len(present)))])
                else:
                    ins.append(edge())
            net = Counter(ins)
            net.subtract(Counter(rem))
            for e, c in list(net.items()):
                if live[e] + c < 0:
                    net[e] = -live[e]
            ups = [(e, c) for e, c in net.items() if c]
            if ups:
                E.update([e for e, _ in ups], [c for _, c in ups])
                for e, c in ups:
                    live[e] += c
            if S is not None and ep == 2:
                S.insert([(7,)])
                srcs[7] += 1
            if S is not None and ep == 4 and srcs[0] > 0:
                S.remove([(0,)])
                srcs[0] -= 1
            if S is not None and nsrc > 2 and ep % 2:  # fresh groups next epoch, and some gone
                add = sorted({int(x) for x in rng.integers(0, n + 2, 3)} - {x for x, c in srcs.items() if c > 0})
                gone = [x for x, c in srcs.items() if c > 0 and rng.random() < 0.2]
                if add:
                    S.insert([(x,) for x in add])
                if gone:
                    S.remove([(x,) for x in gone])
                for x in add:
                    srcs[x] += 1
                for x in gone:
                    srcs[x] -= 1
    finally:
        eng.close()


def _digraph(live, weighted):
    g = nx.DiGraph()
    for e, c in live.items():
        if c > 0:
            a, b = e[0], e[1]
            w = e[2] if weighted else 1
            if not g.has_edge(a, b) or g[a][b]["w"] > w:
                g.add_edge(a, b, w=w)
    return g


def sssp_oracle(live, srcs):
    g = _digraph(live, True)
    out = []
    for s in sorted(s for s, c in srcs.items() if c > 0):
        dist = nx.single_source_dijkstra_path_length(g, s, weight="w") if s in g else {s: 0}
        out += [(s, v, d) for v, d in dist.items()]
    return sorted(out)


def khop_oracle(live, srcs, k=3):
    g = _digraph(live, False)
    out = []
    for s in sorted(s for s, c in srcs.items() if c > 0):
        hops = nx.single_source_shortest_path_length(g, s, cutoff=k) if s in g else {s: 0}
        out += [(s, v, d) for v, d in hops.items()]
    return sorted(out)


def wcc_oracle(live, _):
    g = nx.Graph()
    g.add_edges_from((e[0], e[1]) for e, c in live.items() if c > 0)
    return sorted((v, min(c)) for c in nx.connected_components(g) for v in c)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sssp_checked(checked, workers):
    run_stream(workers, 100 + workers, lambda df, mem, drop: graphs.sssp(df.input("edges"), df.input("sources"),
                                                                          memory=mem, drop=drop),
               ["source", "node", "dist"], sssp_oracle)
    assert checked["rows_kh"] and checked["aggregate"] and checked["key_index"]


@pytest.mark.parametrize("workers", [1, 3])
def test_khop_checked(checked, workers):
    run_stream(workers, 200 + workers, lambda df, mem, drop: graphs.khop(df.input("edges"), df.input("sources"), 3,
                                                                          memory=mem, drop=drop),
               ["source", "node", "hops"], khop_oracle, weighted=False)


@pytest.mark.parametrize("workers", [1, 2])
def test_wcc_checked(checked, workers):
    """wcc: no groups (spec.ng == 0), so ``_values`` and ``_out_keys`` pass ``kh`` on to the edge ports."""
    run_stream(workers, 300 + workers, lambda df, mem, drop: graphs.wcc(df.input("edges"), memory=mem, drop=drop),
               ["node", "label"], wcc_oracle, weighted=False, sources=False)
    assert checked["rows_kh"] > 0


@pytest.mark.parametrize("workers, seed", [(1, 0), (2, 1), (3, 2), (1, 3), (2, 4), (3, 5)])
def test_sssp_random_streams_checked(checked, workers, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 25))
    run_stream(workers, 1000 + seed, lambda df, mem, drop: graphs.sssp(df.input("edges"), df.input("sources"),
                                                                        memory=mem, drop=drop),
               ["source", "node", "dist"], sssp_oracle, n=n, m=int(n * rng.uniform(0.5, 4)), epochs=5)


pagerank_oracle = pagerank_oracle_of(5)


@pytest.mark.parametrize("workers", [1, 3])
def test_pagerank_checked(checked, workers):
    """pagerank: float sums, messages reading the sender's out-degree, a round limit, no groups."""
    run_stream(workers, 400 + workers, lambda df, mem, drop: graphs.pagerank(df.input("edges"), iterations=5,
                                                                              memory=mem, drop=drop),
               ["node", "rank"], pagerank_oracle, weighted=False, sources=False, approx=True)


# -- Collection.ife directly: float states and weights, two group columns or none ------------------------
NAN_BITS = int(np.array([np.nan]).view(np.int64)[0])


def _bits(x, canonical_nan=True):
    """A float's int64 bits; every NaN as np.nan's unless ``canonical_nan`` is False (then the bits the
    view holds: see test_jod_nan_bits_differ_from_full)."""
    if canonical_nan and x != x:
        return NAN_BITS
    return int(np.array([x], np.float64).view(np.int64)[0])


def _read_bits(view, cols, fcol, canonical_nan=True):
    df = view.to_pandas()
    out = []
    for r in df[cols].itertuples(index=False, name=None):
        out.append(tuple(_bits(x, canonical_nan) if c == fcol and isinstance(x, float) else int(x)
                         for c, x in zip(cols, r)))
    return sorted(out)


FLOATS = [0.0, -0.0, 0.5, 1.0, 2.5, 1e300, np.inf, np.nan, 3.0, 0.25]


INTS = [I64.min + 1, I64.min + 2, -1, 0, 1, 5, I64.max - 1, I64.max]


def run_direct(workers, seed, agg, groups, rounds, epochs=5, ints=False):
    """start(g1, g2, node, x float) .ife(edges (src, dst, w float)), message x + w (min), min(x, w) (max)
    or x * w / 4 (sum), every mode against full bit for bit (NaN and inf states included)."""
    rng = np.random.default_rng(seed)
    eng = kp.Engine(workers=workers)
    key = (["g1", "g2"] if groups else []) + ["node"]
    try:
        E = eng.input("edges", ["src", "dst", "w"], dtypes=None if ints else {"w": "float64"})
        S = eng.input("starts", key + ["x"], dtypes=None if ints else {"x": "float64"})
        n = 9
        msg = {"min": lambda x, w: x + w, "max": lambda x, w: np.minimum(x, w),  # (bounded: a fixed point)
               "sum": lambda x, w: x * w * 0.25}[agg]
        if ints:  # int64 extremes: messages that cannot overflow
            msg = {"min": lambda x, w: np.maximum(x, w), "max": lambda x, w: np.minimum(x, w)}[agg]
        views = {}
        for label, (memory, drop) in {"full": ("full", None), **MODES}.items():
            with eng.dataflow(label) as df:
                views[label] = df.input("starts").ife(df.input("edges"), key=key, node="node", value="x",
                                                      message=msg, agg=agg, rounds=rounds, memory=memory,
                                                      drop=drop).view("out")
        live_e, live_s = Counter(), Counter()

        def fl():
            if ints:
                return int(INTS[int(rng.integers(len(INTS)))]) if rng.random() < 0.5 else int(rng.integers(-3, 7))
            return float(FLOATS[int(rng.integers(len(FLOATS)))]) if rng.random() < 0.4 else float(rng.integers(0, 7))

        def step(k):
            ups = Counter()
            for _ in range(k):
                present = [e for e, c in live_e.items() if c > 0]
                if present and rng.random() < 0.4:
                    e = present[int(rng.integers(len(present)))]
                    ups[e] -= 1
                else:
                    ups[(int(rng.integers(n)), int(rng.integers(n)), fl())] += 1
            ups = {e: c for e, c in ups.items() if c and live_e[e] + c >= 0}
            if ups:
                E.update(list(ups), list(ups.values()))
                for e, c in ups.items():
                    live_e[e] += c
            sups = Counter()
            for _ in range(int(rng.integers(0, 3))):
                present = [s for s, c in live_s.items() if c > 0]
                if present and rng.random() < 0.3:
                    sups[present[int(rng.integers(len(present)))]] -= 1
                else:
                    g = tuple(int(x) for x in rng.integers(0, 2, 2)) if groups else ()
                    x = fl() if agg != "sum" else float(rng.integers(-3, 4))
                    if ints and x == I64.min + 1 and rng.random() < 0.5:
                        x = I64.min + 2
                    sups[g + (int(rng.integers(n)), x)] += 1
            sups = {s: c for s, c in sups.items() if c and live_s[s] + c >= 0}
            if sups:
                S.update(list(sups), list(sups.values()))
                for s, c in sups.items():
                    live_s[s] += c
        step(20)
        for ep in range(1, epochs + 1):
            E.advance_to(ep)
            S.advance_to(ep)
            for v in views.values():
                eng.wait(v, timeout=120)
            full = _read_bits(views["full"], key + ["x"], "x")
            for label, v in views.items():
                got = _read_bits(v, key + ["x"], "x")
                if agg == "sum":
                    assert _close([r[:-1] + (np.int64(r[-1]).view(np.float64),) for r in got],
                                  [r[:-1] + (np.int64(r[-1]).view(np.float64),) for r in full]) or got == full, \
                        (seed, ep, label)
                else:
                    assert got == full, (f"seed {seed} epoch {ep}: {label} differs from full: only {label} "
                                         f"{sorted(set(got) - set(full))[:4]}, only full {sorted(set(full) - set(got))[:4]}")
            step(int(rng.choice([1, 3, 8])))
    finally:
        eng.close()


@pytest.mark.parametrize("agg", ["min", "max"])
@pytest.mark.parametrize("workers, groups, rounds", [(1, True, None), (2, False, None), (3, True, 3), (2, True, None),
                                                     (1, False, 4), (3, False, None)])
def test_direct_float_min_max_checked(checked, agg, workers, groups, rounds):
    run_direct(workers, 17 * workers + (5 if groups else 0) + (rounds or 0), agg, groups, rounds)


@pytest.mark.parametrize("workers, groups", [(1, True), (2, False), (3, True)])
def test_direct_float_sum_checked(checked, workers, groups):
    run_direct(workers, 31 + workers, "sum", groups, 3)


# -- NaN bit patterns ---------------------------------------------------------------------------------
NEG_NAN_BITS = -0x0008000000000000  # 0xFFF8000000000000: x86's "default NaN" (inf - inf, 0 * inf)


def test_extremes_min_of_only_nans_is_the_sorted_first():
    """extremes: the min over rows that are all NaN is the first NaN, as in sorted order (the lexsort it
    replaced); c5da7b4 kept the last (a NaN best was replaced by any later row, NaN too)."""
    q = np.zeros(2, np.int64)
    v = np.array([NAN_BITS, NEG_NAN_BITS], np.int64)
    out = np.full(1, ABSENT, np.int64)
    from kpgnb.engine.kernels import ife as ik
    ik.extremes(q, v, np.ones(2, np.int64), True, False, out)
    x = v.view(np.float64)
    first = int((np.asarray(x[np.lexsort((x, q))][0], np.float64) + 0.0).view(np.int64))
    assert first == NAN_BITS
    assert int(out[0]) == first, f"min of [nan, -nan] gave bits {int(out[0]) & M64:#x}, sorted order {first & M64:#x}"


def _nan_case(agg, memory):
    eng = kp.Engine(workers=1)
    try:
        E = eng.input("edges", ["src", "dst", "w"], dtypes={"w": "float64"})
        S = eng.input("starts", ["node", "x"], dtypes={"x": "float64"})
        views = {}
        for mem in ("full", memory):
            with eng.dataflow(mem) as df:
                views[mem] = df.input("starts").ife(df.input("edges"), key=["node"], node="node", value="x",
                                                    message=lambda x, w: x + w, agg=agg, memory=mem,
                                                    rounds=1).view("out")
        E.insert([(0, 1, -np.inf)])          # node 1's message: inf + -inf, a NaN with the sign bit set
        S.insert([(0, np.inf), (1, np.nan)])  # node 1's start row: the canonical NaN
        E.advance_to(1)
        S.advance_to(1)
        for v in views.values():
            eng.wait(v, timeout=60)
        return (_read_bits(views["full"], ["node", "x"], "x", canonical_nan=False),
                _read_bits(views[memory], ["node", "x"], "x", canonical_nan=False))
    finally:
        eng.close()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_jod_min_nan_bits_match_full():
    """agg="min", node 1's rows are its start NaN (canonical) and a message NaN (inf + -inf, x86's
    0xFFF8...): jod's state has full's bits (c5da7b4 kept the message's)."""
    full, jod = _nan_case("min", "jod")
    assert jod == full, (full, jod)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_jod_nan_bits_equal_full_for_max():
    """A message returning a NaN of other bits than np.nan's (inf - inf) is canonicalized by jod as by
    full's columns (operators/ife.py _message, columns.float_bits); before session 36 jod kept the bits,
    so agg="max" states differed from full's."""
    full, jod = _nan_case("max", "jod")
    assert jod == full, (full, jod)


# -- multiplicity overflow ------------------------------------------------------------------------------
@pytest.mark.parametrize("memory", ["jod", "drop"])
@pytest.mark.parametrize("agg", ["sum", "min"])
def test_rows_multiplicity_overflow_raises(memory, agg):
    """An edge whose multiplicity reaches 2**62 over two epochs: the operator's consolidation of its rows
    must raise kp's multiplicity error (not wrap to a negative count, which min would then drop)."""
    eng = kp.Engine(workers=1)
    try:
        E = eng.input("edges", ["src", "dst", "w"])
        S = eng.input("starts", ["node", "x"])
        drop = kp.Drop(p=0.5, policy="random", tracker="exact") if memory == "drop" else None
        with eng.dataflow("d") as df:
            v = df.input("starts").ife(df.input("edges"), key=["node"], node="node", value="x",
                                       message=lambda x, w: x + w, agg=agg, memory=memory, drop=drop,
                                       rounds=2).view("out")
        E.update([(0, 1, 1)], [MAX_MULT - 1])
        S.update([(0, 1)], [1])
        E.advance_to(1)
        S.advance_to(1)
        eng.wait(v, timeout=60)
        assert sorted(v.to_pandas()["node"].tolist()) == [0, 1]
        E.update([(0, 1, 1)], [1])
        E.advance_to(2)
        S.advance_to(2)
        with pytest.raises(Exception, match="multiplicity reaches 2\\*\\*62"):
            eng.wait(v, timeout=60)
    finally:
        eng.close()


# -- the collision test hooks ---------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_jod_under_colliding_hash_hooks(monkeypatch):
    """With the arrangement hashes substituted through kernels/sort.py's hooks (as tests/test_trace.py
    does), jod still finds its start rows: round 0 hashes its keys through the hookable ``key_hashes``
    (c5da7b4 called the kernel bound at import, and jod's output came out empty)."""
    from kpgnb.engine.kernels import sort as sortk

    def coarse(keys):
        if not keys.shape[0]:
            return np.zeros(keys.shape[1], np.int64)
        return ((np.abs(keys[0]) % 3).astype(np.int64) << np.int64(38)) | (np.abs(keys[-1]) % 2).astype(np.int64)

    def packed(keys):
        return (coarse(keys).astype(np.uint64) << np.uint64(sortk.POS_BITS)) | np.arange(keys.shape[1], dtype=np.uint64)

    def into(keys, out, lo=0, hi=None):
        hi = keys.shape[1] if hi is None else hi
        out[lo:hi] = coarse(keys)[lo:hi]
        return out
    monkeypatch.setattr(sortk, "hash_keys", coarse)
    monkeypatch.setattr(sortk, "packed_hashes", packed)
    monkeypatch.setattr(sortk, "key_hashes", into)
    edges = [(0, 1, 3), (1, 2, 1), (0, 2, 7), (2, 3, 2), (3, 0, 1), (3, 4, 5), (4, 5, 1), (5, 1, 2)]
    eng = kp.Engine(workers=1)
    try:
        E = eng.input("edges", ["src", "dst", "w"])
        S = eng.input("sources", ["source"])
        views = {}
        for mem in ("full", "jod"):
            with eng.dataflow(mem) as df:
                views[mem] = graphs.sssp(df.input("edges"), df.input("sources"), memory=mem).view("out")
        E.insert(edges)
        S.insert([(0,), (3,)])
        E.advance_to(1)
        S.advance_to(1)
        for v in views.values():
            eng.wait(v, timeout=60)
        cols = ["source", "node", "dist"]
        full, jod = _read(views["full"], cols), _read(views["jod"], cols)
        assert full == sssp_oracle(Counter(edges), Counter({0: 1, 3: 1}))
        assert jod == full, f"jod {jod} full {full}"
    finally:
        eng.close()


@pytest.mark.parametrize("agg", ["min", "max"])
@pytest.mark.parametrize("workers, groups", [(1, True), (2, False), (3, True)])
def test_direct_int64_extremes_checked(checked, agg, workers, groups):
    """int states at int64's extremes (the minimum + 1 and + 2 next to "no state", the maximum)."""
    run_direct(workers, 61 + workers, agg, groups, None, ints=True)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_many_sources_checked(checked, workers):
    """Many SPSP sources (spec.ng > 0: ``kh`` is not passed to the edge ports), sources added (fresh groups
    running apart) and removed every other epoch."""
    run_stream(workers, 500 + workers, lambda df, mem, drop: graphs.sssp(df.input("edges"), df.input("sources"),
                                                                          memory=mem, drop=drop),
               ["source", "node", "dist"], sssp_oracle, n=18, m=45, nsrc=10, epochs=5)


def test_fan_in_takes_the_hash_path_at_real_size(monkeypatch):
    """A first load where one round's out-neighbours repeat (1,500 middle nodes, each into 4 of 8 sinks):
    key_index gets 6,000 keys of 8 distinct (hash path, default DEDUPE_ROWS), then an update stream; jod
    and drop against full, full against networkx."""
    calls = Counter()
    key_index = opi.key_index

    def spy(keys):
        if keys.shape[1] >= cursor.DEDUPE_ROWS:
            calls["big"] += 1
            got = key_index(keys)
            if len(got[0]) <= keys.shape[1] // 4:
                calls["hashed"] += 1
            return got
        return key_index(keys)
    monkeypatch.setattr(opi, "key_index", spy)
    rng = np.random.default_rng(5)
    mids, sinks = 1500, 8
    edges = Counter()
    for m in range(mids):
        edges[(0, 1 + m, int(rng.integers(1, 9)))] += 1
        for s in rng.choice(sinks, 4, replace=False):
            edges[(1 + m, 10_000 + int(s), int(rng.integers(1, 9)))] += 1
    eng = kp.Engine(workers=2)
    try:
        E = eng.input("edges", ["src", "dst", "w"])
        S = eng.input("sources", ["source"])
        E.insert(list(edges))
        S.insert([(0,)])
        views = {}
        for label, (memory, drop) in {"full": ("full", None), "jod": MODES["jod"], "det": MODES["det"]}.items():
            with eng.dataflow(label) as df:
                views[label] = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory, drop=drop).view("out")
        cols = ["source", "node", "dist"]
        for ep in range(1, 4):
            E.advance_to(ep)
            S.advance_to(ep)
            for v in views.values():
                eng.wait(v, timeout=120)
            full = _read(views["full"], cols)
            assert full == sssp_oracle(edges, Counter({0: 1}))
            for label in ("jod", "det"):
                assert _read(views[label], cols) == full, (ep, label)
            ups = {}
            for e in list(edges)[int(rng.integers(0, 100))::97][:40]:
                ups[e] = -1
            for m in rng.integers(1, mids + 1, 30):
                ups[(int(m), 10_000 + int(rng.integers(sinks)), int(rng.integers(1, 9)))] = 1
            ups = {e: d for e, d in ups.items() if edges[e] + d >= 0}
            E.update(list(ups), list(ups.values()))
            for e, d in ups.items():
                edges[e] += d
    finally:
        eng.close()
    assert calls["hashed"] > 0, calls


# -- the batcher's split of parts of few times ------------------------------------------------------------
def _minimal(times):
    ts = set(times)
    return sorted(t for t in ts if not any(u != t and all(a <= b for a, b in zip(u, t)) for u in ts))


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_batcher_split_few_times_partial_order(seed, d):
    """Parts of a few partially ordered times (depth 2, 3), frontiers of 1-3 incomparable times that
    straddle them (some of a part's times in advance of some frontier element, others of none): each seal
    gives exactly the updates not in advance, and what stays buffered (``buffered``, ``held``: the
    minimal times) is exactly the rest; the split parts are split again by later seals."""
    rng = np.random.default_rng(seed)
    kk, kv = 1 + seed % 2, seed % 3
    bt = Batcher(kk, kv, d, 1)
    pending = Counter()
    lower = Antichain([(0,) * d])
    base = 0
    for step in range(10):
        parts = []
        tpool = [tuple([base + int(rng.integers(0, 3))] + [int(rng.integers(0, 4)) for _ in range(d - 1)])
                 for _ in range(int(rng.integers(2, 8)))]
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.choice([2, 7, 50, 300]))
            keys = rng.integers(-3, 3, (kk, n)).astype(np.int64)
            vals = rng.integers(-2, 2, (kv, n)).astype(np.int64)
            times = np.array([tpool[i] for i in rng.integers(0, len(tpool), n)], np.int64).reshape(n, d)
            diffs = rng.choice(np.array([-1, 1, 2], np.int64), n)
            parts.append((keys, vals, times, diffs))
            for i in range(n):
                pending[(tuple(keys[:, i].tolist()), tuple(vals[:, i].tolist()), tuple(times[i].tolist()))] += int(diffs[i])
        bt.push(parts)
        k = int(rng.integers(1, 4))
        ups = [tuple([base + int(rng.integers(0, 3))] + [int(rng.integers(0, 5)) for _ in range(d - 1)]) for _ in range(k)]
        ups = [u for u in ups if not any(v != u and all(a <= b for a, b in zip(v, u)) for v in ups)]
        upper = Antichain(sorted(set(ups))) if step < 9 else Antichain()
        batches = bt.seal(lower, upper)
        got = Counter()
        for b in batches:
            for kx in range(b.keys.shape[1]):
                for r in range(b.koff[kx], b.koff[kx + 1]):
                    got[(tuple(b.keys[:, kx].tolist()), tuple(b.vals[:, r].tolist()), tuple(b.times[r].tolist()))] += int(b.diffs[r])
        want = Counter()
        for (kx, v, t), dd in pending.items():
            if not upper.dominates(t):
                want[(kx, v, t)] += dd
        for r_ in want:
            pending[r_] -= want[r_]
        assert got == Counter({r_: x for r_, x in want.items() if x}), (seed, d, step)
        assert bt.buffered == sum(len(p) for p in bt.buffer)
        assert sum(int(p.diffs.sum()) for p in bt.buffer) == sum(pending.values())
        held_rows = [tuple(t) for p in bt.buffer for t in p.times.tolist()]
        assert sorted(bt.held.elements) == _minimal(held_rows), (seed, d, step)
        assert all(upper.dominates(t) for t in held_rows)
        for p in bt.buffer:
            if p.single:
                assert (p.times == p.times[:1]).all() and tuple(p.times[0].tolist()) == p.lo.elements[0]
        pending = Counter({r_: x for r_, x in pending.items() if x})
        lower = upper
        base += int(rng.integers(0, 2))
