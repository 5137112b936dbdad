"""Which `SweepStore` serves a backend: apart from `_sweep`, which each store's sweep
imports, so that the stores' modules and their base form no import circle."""

from __future__ import annotations

from retaining_saver.backends._base import Backend
from retaining_saver.backends._sweep import SweepStore


def store_for(backend: Backend) -> SweepStore:
    """The `SweepStore` of `backend`'s kind of store."""
    if backend.kind == "postgres":
        from retaining_saver.backends._postgres_sweep import PostgresSweep

        return PostgresSweep(backend)
    if backend.kind == "sqlite":
        from retaining_saver.backends._sqlite_sweep import SqliteSweep

        return SqliteSweep(backend)
    from retaining_saver.backends._memory_sweep import MemorySweep

    return MemorySweep(backend)
