"""Shared helpers for the benchmark programs: timing, JSON results, tables."""
from __future__ import annotations

import json
import os
import platform
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(), "cores": os.cpu_count(),
            "processor": platform.processor() or platform.machine()}


def parse_args(parser, argv, quick: dict):
    """Parse ``argv`` with a ``--quick`` option that swaps the defaults for ``quick`` (small sizes that
    finish well under a minute on 2 cores); options given explicitly still win."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes for a smoke run (explicit options still apply); writes "
                             "bench/results/NAME-quick.json, leaving the full results alone")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**quick)
    return parser.parse_args(argv)


def write_result(name: str, payload: dict, quick: bool = False) -> str:
    """Write ``bench/results/NAME.json`` (``NAME-quick.json`` for a --quick run, also marked in the JSON)."""
    os.makedirs(RESULTS, exist_ok=True)
    payload = {"benchmark": name, "quick": quick, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "machine": machine(), **payload}
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
