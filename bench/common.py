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


def write_result(name: str, payload: dict) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    payload = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(), **payload}
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=str)
    return path


def table(rows: list, cols: list) -> str:
    widths = [max(len(str(c)), *(len(_fmt(r.get(c))) for r in rows)) for c in cols]
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
