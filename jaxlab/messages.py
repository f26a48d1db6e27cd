"""Wording shared by error messages across jaxlab's packages (imports nothing of jaxlab, so any module
may use it)."""

from __future__ import annotations


def short_repr(value, width: int = 60) -> str:
    """``value`` for a message: its repr on one line (runs of whitespace, such as a numpy array's line
    breaks, made one space), cut to ``width`` characters with "..." when longer."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[:width - 3] + "..."
