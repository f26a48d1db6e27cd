"""Wording shared by error messages across jaxlab's packages (imports nothing of jaxlab, so any module
may use it)."""

from __future__ import annotations

from pathlib import Path


def short_repr(value, width: int = 60) -> str:
    """``value`` for a message: its repr on one line (runs of whitespace, such as a numpy array's line
    breaks, made one space), cut to ``width`` characters with "..." when longer."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def install_extra(extra: str) -> str:
    """The command that installs jaxlab's optional dependencies ``extra`` (a pyproject.toml extra: gymnasium,
    plot, gif, sweep, wandb, cuda12, ...). jaxlab is not on PyPI, so `pip install 'jaxlab[EXTRA]'` finds
    nothing: the extra is installed from the checkout jaxlab runs from, named by its path so that the command
    works from any folder, or, where jaxlab is not run from a checkout, from "." in the checkout."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return f'pip install -e "{checkout}[{extra}]"'
    return f'pip install -e ".[{extra}]" (in the jaxlab checkout)'


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """The noun for ``count`` of it, without the count (before a list of them): plural(1, "line") is 'line',
    plural(2, "line") 'lines', plural(2, "process", "processes") 'processes' (``nouns``: as counted's)."""
    return noun if count == 1 else nouns or noun + "s"


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and its noun, singular for one: counted(1, "update") is '1 update', counted(1_000, "update")
    '1,000 updates', counted(2, "process", "processes") '2 processes' (``nouns``: the plural where "s" is not)."""
    return f"{count:,} {plural(count, noun, nouns)}"
