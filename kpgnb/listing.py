"""``%dataflow list``: the kernel's dataflows, inputs and exported arrangements, as tables (HTML in a
notebook, text in a terminal). Built from one published snapshot, so the three tables agree."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Listing:
    dataflows: object    # pandas DataFrames
    inputs: object
    arrangements: object
    error: str | None = None   # the engine's scheduler failed (sticky): what it failed with, shown first

    @classmethod
    def of(cls, eng) -> "Listing":
        snap = eng.snapshot()
        with snap.pinned():  # (a dataflow dropped meanwhile is in every table or in none)
            return cls._of(eng, snap)

    @classmethod
    def _of(cls, eng, snap) -> "Listing":
        import pandas as pd

        from .engine.scope import epoch_of
        flows = [{"dataflow": n, "status": d.status, "frontier": _epoch(epoch_of(d.frontier)),
                  "views": ", ".join(v for v, _ in d.views), "exports": ", ".join(d.exports),
                  "imports": ", ".join(d.uses), "error": _error(d.error)}
                 for n, d in sorted(snap.dataflows.items()) if not snap.gone(d)]
        flows += [{"dataflow": n, "status": d.status, "frontier": _epoch(epoch_of(d.frontier)), "views": "",
                   "exports": ", ".join(d.exports), "imports": ", ".join(d.uses), "error": _error(d.error)}
                  for n, d in sorted(snap.retired.items()) if not snap.gone(d)]
        inputs = [{"input": n, "columns": ", ".join(f"{c}: {t}" for c, t in zip(s.schema.names, s.schema.dtypes)),
                   "epoch": s.epoch, "closed": s.closed, "records": s.trace.stats()["records"]}
                  for n, s in sorted(eng.inputs().items())]
        arrs = [{"arrangement": n, "dataflow": a["dataflow"], "key": ", ".join(a["key"]),
                 "values": ", ".join(a["values"]), "records": a["records"], "readers": a["readers"]}
                for n, a in sorted(eng.catalog(snap).items())]
        flow_cols = ["dataflow", "status", "frontier", "views", "exports", "imports"]
        if any(f["error"] for f in flows):  # (why a dataflow failed or was cancelled; no column while none did)
            flow_cols.append("error")
        # (the dataflows' statuses stay as they were when it failed: none computes any more, every wait raises)
        failed = None if snap.error is None else (
            f"{' '.join(str(snap.error).split())}; no dataflow computes any more: %dataflow config --restart "
            f"starts a new engine, losing every dataflow and input")
        return cls(pd.DataFrame(flows, columns=flow_cols),
                   pd.DataFrame(inputs, columns=["input", "columns", "epoch", "closed", "records"]),
                   pd.DataFrame(arrs, columns=["arrangement", "dataflow", "key", "values", "records", "readers"]),
                   failed)

    def _parts(self):
        return (("Dataflows", self.dataflows), ("Inputs", self.inputs), ("Arrangements", self.arrangements))

    def _repr_html_(self):
        import html
        failed = f"<div><b>Engine failed</b>: {html.escape(self.error)}</div>" if self.error else ""
        return failed + "".join(f"<b>{title}</b>" + (t.to_html(index=False, escape=True) if len(t) else
                                                     "<div>none</div>") for title, t in self._parts())

    def _repr_pretty_(self, p, cycle):
        p.text((f"Engine failed: {self.error}\n\n" if self.error else "")
               + "\n\n".join(f"{title}\n" + (t.to_string(index=False) if len(t) else "none")
                             for title, t in self._parts()))


def _epoch(e):
    return "closed" if e is None else e


def _error(e) -> str:
    """What a dataflow failed (or was cancelled) with, on one line; "" when it did not."""
    if e is None:
        return ""
    text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
