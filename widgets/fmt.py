"""How the widgets write numbers, frontiers and tables: short, and the same in every widget."""
from __future__ import annotations

import html


def frontier(f) -> str:
    """``3`` for a top-level frontier at epoch 3, ``{(3, 1), (4, 0)}`` for others, ``done`` when empty."""
    if f is None:
        return "-"
    els = getattr(f, "elements", f)
    if not els:
        return "done"
    if len(els) == 1 and len(els[0]) == 1:
        return str(els[0][0])
    return "{" + ", ".join("(" + ", ".join(map(str, e)) + ")" for e in els) + "}"


def count(n) -> str:
    return "-" if n is None else f"{int(n):,}"


def nbytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def seconds(s) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


STYLE = ("<style>.kpgnb-t{border-collapse:collapse;font-size:12px;font-family:monospace}"
         ".kpgnb-t th,.kpgnb-t td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}"
         ".kpgnb-t th{background:#f4f4f4}.kpgnb-t td.l,.kpgnb-t th.l{text-align:left}"
         ".kpgnb-t tr.bad td{color:#b00}.kpgnb-t td.warn{color:#b60}</style>")


def table(columns, rows, empty: str) -> str:
    """An HTML table: ``columns`` as (title, left-aligned?); ``rows`` as (cells, row class), each cell a
    string or (string, cell class). Everything is escaped."""
    if not rows:
        return f"<div><i>{html.escape(empty)}</i></div>"
    head = "".join(f"<th class='{'l' if left else ''}'>{html.escape(t)}</th>" for t, left in columns)
    body = []
    for cells, cls in rows:
        tds = []
        for (_, left), cell in zip(columns, cells):
            text, ccls = cell if isinstance(cell, tuple) else (cell, "")
            ccls = " ".join(c for c in ("l" if left else "", ccls) if c)
            tds.append(f"<td class='{ccls}'>{html.escape(str(text))}</td>")
        body.append(f"<tr class='{cls}'>{''.join(tds)}</tr>")
    return f"{STYLE}<table class='kpgnb-t'><tr>{head}</tr>{''.join(body)}</table>"
