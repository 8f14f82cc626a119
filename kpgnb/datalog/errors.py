"""Datalog errors as the user sees them: the message, then the program line with a caret under the
offending text. ``line``/``column`` are 1-based positions in the program (for a cell: in the cell)."""
from __future__ import annotations

import unicodedata

from ..engine.errors import DatalogError


def datalog_error(text: str, line: int, column: int, message: str, span=None) -> DatalogError:
    """A DatalogError at (line, column) of ``text``; ``span`` (syntax.Span) widens the caret to the node."""
    lines = text.split("\n")  # lines as the parser counts them (not str.splitlines: form feeds, U+2028...)
    src = lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else ""
    width = 1
    if span is not None and span.end_line == span.line:
        width = max(1, span.end_column - span.column)
    # as wide as the text before it as a terminal shows it: tabs kept, wide (CJK, emoji) characters two
    # cells, combining marks none
    pad = "".join(c if c == "\t" else "" if unicodedata.combining(c) else
                  "  " if unicodedata.east_asian_width(c) in "WF" else " " for c in src[:column - 1])
    caret = pad + " " * max(0, column - 1 - len(src)) + "^" * min(width, max(1, len(src) - column + 1))
    gutter = f"{line:>4} | "
    err = DatalogError(f"line {line}, column {column}: {message}\n{gutter}{src}\n{' ' * len(gutter)}{caret}")
    err.line, err.column, err.reason = line, column, message
    return err


def at(text: str, node, message: str) -> DatalogError:
    """A DatalogError pointing at a syntax node (anything with a ``span``)."""
    span = getattr(node, "span", None)
    if span is None:
        return datalog_error(text, 1, 1, message)
    return datalog_error(text, span.line, span.column, message, span)
