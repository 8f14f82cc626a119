"""PROB-DROP's Bloom filter sized by default at the first epoch that drops entries (engine/dropping.py
``BloomTracker._size``): the size and hash count it picks, answers equal to the full computation on every
epoch, and false positives close to none (recomputations near the exact tracker's, where an undersized
filter recomputes many times more)."""
import math

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from kpgnb.engine.dropping import BITS_PER_PAIR, MAX_AUTO_HASHES, MIN_BITS, BloomTracker

SOURCES = [0, 3, 7]


def _graph(seed, n=1500, m=7000):
    rng = np.random.default_rng(seed)
    e = {}
    while len(e) < m:
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if a != b:
            e[(a, b)] = int(rng.integers(1, 10))
    return rng, n, e


def _run(workers, seed, modes, epochs=6, per_epoch=40):
    """SSSP under each (name -> (memory, drop)) in one engine, the same stream of changes; per epoch each
    mode's rows, and each mode's IFE report at the end and after the first epoch."""
    rng, n, e = _graph(seed)
    out = {k: [] for k in modes}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], rows=[(a, b, w) for (a, b), w in e.items()])
        srcs = eng.input("sources", ["source"], rows=[(s,) for s in SOURCES])
        views = {}
        for name, (memory, drop) in modes.items():
            with eng.dataflow(name) as df:
                views[name] = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory,
                                          drop=drop).view("d")
        first = None
        for ep in range(1, epochs + 1):
            edges.advance_to(ep)
            srcs.advance_to(ep)
            for v in views.values():
                eng.wait(v)
            for name, v in views.items():
                df = v.to_pandas()
                out[name].append(sorted(zip(df["source"], df["node"], df["dist"])))
            if first is None:
                first = {r["dataflow"]: r for r in eng.stats()["ife"]}
            keys = list(e)
            rem = [keys[i] for i in rng.choice(len(keys), per_epoch // 2, replace=False)]
            edges.remove([(a, b, e.pop((a, b))) for a, b in rem])
            ins = []
            while len(ins) < per_epoch // 2:
                a, b = (int(x) for x in rng.integers(0, n, 2))
                if a != b and (a, b) not in e:
                    e[(a, b)] = int(rng.integers(1, 10))
                    ins.append((a, b, e[(a, b)]))
            edges.insert(ins)
        last = {r["dataflow"]: r for r in eng.stats()["ife"]}
    return out, first, last


@pytest.mark.parametrize("workers,seed", [(1, 0), (2, 1), (3, 2)])
def test_default_filter_is_sized_at_the_first_drop_and_answers_equal_full(workers, seed):
    modes = {"full": ("full", None),
             "exact": ("drop", kp.Drop(p=0.5, policy="random", tracker="exact")),
             "auto": ("drop", kp.Drop(p=0.5, policy="random", tracker="bloom")),
             "tiny": ("drop", kp.Drop(p=0.5, policy="random", tracker="bloom", bloom_bits=64, bloom_hashes=1))}
    out, first, last = _run(workers, seed, modes)
    for name in ("exact", "auto", "tiny"):
        assert out[name] == out["full"], name
    n = first["auto"]["dropped"]
    assert n > 1000  # the first load drops entries: the filter is sized for them
    bits = max(MIN_BITS, 1 << (BITS_PER_PAIR * n - 1).bit_length())
    hashes = min(MAX_AUTO_HASHES, max(1, round(math.log(2) * bits / (2 * n))))
    assert first["auto"]["bloom"] == {"bits": bits, "hashes": hashes}
    assert last["auto"]["bloom"] == first["auto"]["bloom"]  # fixed once chosen
    assert last["auto"]["bytes"]["dropped_tracker"] == bits // 8
    assert last["tiny"]["bloom"] == {"bits": 64, "hashes": 1}
    # the same entries dropped (the choice does not depend on the tracker); false positives near none
    assert last["auto"]["dropped_total"] == last["exact"]["dropped_total"]
    exact, auto, tiny = (last[k]["recomputed"] for k in ("exact", "auto", "tiny"))
    assert auto <= 1.2 * exact + 20, (exact, auto)
    assert tiny > 3 * auto, (auto, tiny)


def test_a_given_size_takes_the_hash_count_for_the_first_drop():
    t = BloomTracker(1 << 20, None)
    assert t.describe() == {"bits": 1 << 20, "hashes": None} and t.nbytes() == (1 << 20) // 8
    keys = np.arange(5000, dtype=np.int64)[None, :]
    t.update(keys, np.ones(5000, np.int64), np.ones(5000, np.int64), 0, None)
    assert t.describe() == {"bits": 1 << 20, "hashes": min(MAX_AUTO_HASHES, round(math.log(2) * (1 << 20) / 10000))}
    # no false negatives, whatever was chosen
    from kpgnb.engine.kernels.sort import hash_keys
    kh = hash_keys(keys)
    got = t.latest(keys, kh, np.zeros(5000, np.int64), np.full(5000, 3, np.int64))
    assert (got >= 1).all()


def test_an_automatic_filter_before_any_drop_answers_none_and_costs_nothing():
    t = BloomTracker(None, None)
    assert t.describe() == {"bits": None, "hashes": None} and t.nbytes() == 0
    keys = np.arange(4, dtype=np.int64)[None, :]
    assert (t.latest(keys, keys[0], np.zeros(4, np.int64), np.full(4, 9, np.int64)) == -1).all()
    t.update(keys, np.ones(4, np.int64), -np.ones(4, np.int64), 0, None)  # forgetting inserts nothing
    assert t.describe()["bits"] is None
    t.update(keys, np.ones(4, np.int64), np.ones(4, np.int64), 1, None)
    assert t.describe() == {"bits": MIN_BITS, "hashes": MAX_AUTO_HASHES} and t.markers == 4


@pytest.mark.parametrize("knob,value", [("bloom_bits", 63), ("bloom_bits", 1.5), ("bloom_hashes", 0),
                                        ("bloom_hashes", 17)])
def test_bad_filter_knobs_name_the_default(knob, value):
    with pytest.raises(kp.SchemaError, match=rf"Drop\({knob}={value!r}\).*or None"):
        kp.Drop(tracker="bloom", **{knob: value})
