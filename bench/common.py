"""Shared helpers for the benchmark programs: timing, JSON results, tables."""
from __future__ import annotations

import json
import os
import platform
import time

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(), "cores": os.cpu_count(),
            "processor": platform.processor() or platform.machine()}


def parse_args(parser, argv, quick: dict, positive=(), least: dict | None = None, floats: dict | None = None):
    """Parse ``argv`` with a ``--quick`` option that swaps the defaults for ``quick`` (small sizes that
    finish well under a minute on 2 cores); options given explicitly still win. Integer options are
    checked before anything runs (an argparse error, exit status 2): none is negative, worker counts
    (comma-separated where a benchmark takes several) and the ``positive`` options (by destination name)
    are at least 1, and ``least`` gives other lower bounds (name -> bound). Float options are checked too:
    none is NaN, and ``floats`` gives ranges (name -> ``(low, high)``, either None for no bound; a low
    bound written ``(">", x)`` excludes x itself: ``(">", 0)`` for "more than 0")."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes for a smoke run (explicit options still apply); writes "
                             "bench/results/NAME-quick.json, leaving the full results alone")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**quick)
    args = parser.parse_args(argv)
    bounds = {**{n: 1 for n in positive}, **(least or {})}
    for name, value in vars(args).items():
        flag = f"--{name.replace('_', '-')}"
        if name.endswith("workers") and isinstance(value, str):
            items = value.split(",")
            if not all(x.strip().lstrip("-").isdigit() for x in items):
                parser.error(f"{flag}: expected comma-separated integers, got {value!r}")
            value = [int(x) for x in items]
        bound = bounds.get(name, 1 if name.endswith("workers") else 0)
        items = value if isinstance(value, (list, tuple)) else [value]
        for x in items:
            if isinstance(x, int) and not isinstance(x, bool) and x < bound:
                parser.error(f"{flag}: expected integers >= {bound}, got {x}")
            if isinstance(x, float) and x != x:
                parser.error(f"{flag}: expected a number, got {x}")
    for name, (low, high) in (floats or {}).items():
        value = getattr(args, name)
        if value is None:
            continue
        flag = f"--{name.replace('_', '-')}"
        above = isinstance(low, tuple)
        lo = low[1] if above else low
        if (lo is not None and (value <= lo if above else value < lo)) or (high is not None and value > high):
            want = " and ".join(w for w in (None if lo is None else f"{'>' if above else '>='} {lo}",
                                             None if high is None else f"<= {high}") if w)
            parser.error(f"{flag}: expected a number {want}, got {value}")
    return args


def versions() -> dict:
    """The versions of the libraries a result depends on (peers add their own)."""
    from importlib import metadata
    out = {}
    for dist in ("kpgnb", "numpy", "numba", "pandas", "pyarrow"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    if out["kpgnb"] is None:  # a checkout that is not installed
        import kpgnb
        out["kpgnb"] = kpgnb.__version__
    return out


def write_result(name: str, payload: dict, quick: bool = False) -> str:
    """Write ``bench/results/NAME.json`` (``NAME-quick.json`` for a --quick run, also marked in the JSON)."""
    os.makedirs(RESULTS, exist_ok=True)
    payload = {"benchmark": name, "quick": quick, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "machine": machine(), **payload,
               "versions": {**versions(), **payload.get("versions", {})}}
    path = os.path.join(RESULTS, f"{name}-quick.json" if quick else f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=str)
    return path


def table(rows: list, cols: list) -> str:
    widths = [max([len(str(c))] + [len(_fmt(r.get(c))) for r in rows]) for c in cols]
    line = "  ".join(str(c).ljust(w) for c, w in zip(cols, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(cols, widths)))
    return "\n".join(out)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def percentile(xs, q):
    import numpy as np
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else None


def peak_rss_bytes() -> int:
    """This process's peak resident set size (VmHWM; getrusage where /proc is missing)."""
    import resource
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class WrongAnswer(AssertionError):
    """The engine's answer differs from the reference: a benchmark reports this, never a time."""


def _rows_of(got) -> dict:
    """Columns (name -> array) of a view (``to_pandas()``), a DataFrame or a dict of arrays."""
    if hasattr(got, "to_pandas"):
        got = got.to_pandas()
    if hasattr(got, "columns") and hasattr(got, "to_numpy"):  # a DataFrame
        return {c: got[c].to_numpy() for c in got.columns}
    return dict(got)


def _comparable(a) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(str) if a.dtype == object else a


def rows_differ(got, want: dict, counts=None) -> str | None:
    """None when ``got`` (a view, a DataFrame or columns by name; ``counts``: each row's multiplicity, for
    consolidated columns) holds the same multiset of rows as ``want`` (columns by name), in any order; else
    what differs. Vectorized: both sides' rows are put in lexicographic order and compared column by column."""
    got = _rows_of(got)
    cols = list(want)
    if sorted(map(str, got)) != sorted(map(str, cols)):
        return f"columns {sorted(map(str, got))}, expected {sorted(map(str, cols))}"
    g = [_comparable(got[c]) for c in cols]
    w = [_comparable(want[c]) for c in cols]
    if counts is not None:
        counts = np.asarray(counts)
        if (counts < 0).any():
            return f"{int((counts < 0).sum()):,} rows of negative multiplicity"
        g = [np.repeat(a, counts) for a in g]
    if not cols:
        return None
    n, m = len(g[0]), len(w[0])
    if n != m:
        return f"{n:,} rows, expected {m:,}"
    go, wo = np.lexsort(g[::-1]), np.lexsort(w[::-1])
    bad = [c for c, a, b in zip(cols, g, w) if not np.array_equal(a[go], b[wo])]
    return f"the rows differ from the reference (in columns {bad})" if bad else None


def check_rows(got, want: dict, what: str, counts=None):
    """``got`` holds exactly the rows of ``want`` (see ``rows_differ``); else WrongAnswer."""
    bad = rows_differ(got, want, counts)
    if bad:
        raise WrongAnswer(f"{what}: wrong answer: {bad}")


def check_counts(view, keys, what: str, key: str = "k"):
    """``view`` (columns ``key``, count: ``count(by=key)``) holds the counts of ``keys``; else WrongAnswer."""
    got = view.to_pandas()
    if key not in got or "count" not in got:
        raise WrongAnswer(f"{what}: wrong answer: columns {list(got.columns)}, expected [{key!r}, 'count']")
    k, c = got[key].to_numpy(), got["count"].to_numpy()
    order = np.argsort(k)
    want_k, want_c = np.unique(np.asarray(keys), return_counts=True)
    if not (np.array_equal(k[order], want_k) and np.array_equal(c[order], want_c)):
        raise WrongAnswer(f"{what}: wrong answer: the view's counts are not those of the inserted keys "
                          f"({len(k)} keys, {int(c.sum())} rows; expected {len(want_k)}, {len(keys)})")


def equi_join(left_keys, right_keys, right_vals):
    """The reference of ``left(k).join(right(k, v), on="k")``: (k, v) of every pair of rows with equal keys
    (both sides multisets), by sorting the right side and expanding each left key's range of it."""
    lk, rk, rv = np.asarray(left_keys), np.asarray(right_keys), np.asarray(right_vals)
    order = np.argsort(rk, kind="stable")
    rk, rv = rk[order], rv[order]
    lo, hi = np.searchsorted(rk, lk, "left"), np.searchsorted(rk, lk, "right")
    n = hi - lo
    first = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(n.sum())
    return np.repeat(lk, n), rv[first]


def bfs_distances(src, dst, nodes: int, roots) -> np.ndarray:
    """Unweighted distances from the nearest root (-1: unreachable), by frontier expansion over CSR."""
    order = np.argsort(src, kind="stable")
    d = np.asarray(dst)[order]
    start = np.searchsorted(np.asarray(src)[order], np.arange(nodes + 1))
    dist = np.full(nodes, -1, np.int64)
    frontier = np.unique(np.asarray(roots))
    dist[frontier] = 0
    level = 0
    while len(frontier):
        level += 1
        lens = start[frontier + 1] - start[frontier]
        at = np.repeat(start[frontier] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
        nxt = np.unique(d[at])
        nxt = nxt[dist[nxt] < 0]
        dist[nxt] = level
        frontier = nxt
    return dist


def check_bfs(view, src, dst, nodes: int, roots, what: str):
    """``view`` (columns node, dist: ``kpgnb.graphs.bfs``) holds the distances over the edges ``src -> dst``
    (present ones: a multiset whose removals were applied); else WrongAnswer."""
    got = view.to_pandas()
    want = bfs_distances(src, dst, nodes, roots)
    reached = np.flatnonzero(want >= 0)
    n, dist = got["node"].to_numpy(), got["dist"].to_numpy()
    order = np.argsort(n)
    if not (np.array_equal(n[order], reached) and np.array_equal(dist[order], want[reached])):
        raise WrongAnswer(f"{what}: wrong answer: the view's distances differ from a breadth-first search "
                          f"({len(n)} nodes reached; expected {len(reached)})")
