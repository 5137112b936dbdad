"""The interface every storage backend implements."""

from __future__ import annotations

from typing import Protocol


class Backend(Protocol):
    """Loads lineage and carries out plans for one saver."""

    kind: str
