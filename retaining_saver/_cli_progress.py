"""Progress over threads on long work, with `rich`, where someone is watching.

Shown on stderr only when both stdout and stderr are terminals and the output
is not `--json` (a script reading the output gets none of it), and only with
`rich` installed (the `cli` extra). Otherwise it passes the items through.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Progress:
    """Counts the threads a command has done, as it does them."""

    shown: bool
    label: str = "threads"

    @classmethod
    def of(cls, args: argparse.Namespace) -> Progress:
        """Shown for a person at a terminal, not for --json or a pipe."""
        watched = sys.stdout.isatty() and sys.stderr.isatty() and not args.json
        return cls(watched and _has_rich())

    def over(self, items: Iterable[T], *, total: int | None) -> Iterator[T]:
        """`items`, one by one, with a progress bar while they are worked on."""
        if not self.shown:
            yield from items
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        columns = (
            SpinnerColumn(),
            TextColumn(self.label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Bar(*columns, console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(self.label, total=total)
            for item in items:
                yield item
                bar.advance(task)


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True
