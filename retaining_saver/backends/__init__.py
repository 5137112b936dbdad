"""Storage backends: each loads a thread's lineage and carries out plans.

A backend is chosen by the type of the wrapped saver: one of the supported
savers, or a subclass of one that stores as it does. A subclass that redefines
anything the supported saver's own classes define (a read, a write, a version
scheme, a statement text, an internal helper) may store rows differently, so it is
not recognised: no statement of ours ever reaches a saver whose layout we have not
tested. One that only adds methods (an `adelete_for_runs` an app gives
`AsyncSqliteSaver`), or implements a `BaseCheckpointSaver` method the supported
saver leaves to the base, or overrides `__init__`, stores as its base does.

Every store has one shape: its module (`memory`, `sqlite`, `postgres`) defines one
backend class for the sync and the async saver alike, holding the transactions and
the dialect hooks, and mixes in the parts kept in modules beside it in one order
(admission, plans, statistics, threads), each part a direct subclass of the store's
base (`SqlBackend` for the SQL stores, `Backend` for memory) and of no other part. A
store's SQL is named constants in its `_<store>_sql*` modules; the tuples built as
upstream builds them, and the audit of the internals that takes, are `_upstream`.

`retaining_saver.backends` is not API: nothing here is exported or kept stable,
and a backend is reached only through `RetainingSaver`; the public names are
`retaining_saver`'s and `retaining_saver.testing`'s.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver.backends import _upstream
from retaining_saver.backends._base import Backend

logger = logging.getLogger("retaining_saver")

# (module, class name) of each supported saver -> our module implementing it.
_SUPPORTED: dict[tuple[str, str], str] = {
    ("langgraph.checkpoint.memory", "InMemorySaver"): "memory",
    ("langgraph.checkpoint.sqlite", "SqliteSaver"): "sqlite",
    ("langgraph.checkpoint.sqlite.aio", "AsyncSqliteSaver"): "sqlite",
    ("langgraph.checkpoint.postgres", "PostgresSaver"): "postgres",
    ("langgraph.checkpoint.postgres.aio", "AsyncPostgresSaver"): "postgres",
}


def supported_base(saver_type: type) -> type | None:
    """The supported saver `saver_type` is or subclasses, nearest first; None if none."""
    return next((k for k in saver_type.__mro__ if _key(k) in _SUPPORTED), None)


def store_overrides(saver_type: type) -> list[str]:
    """What a subclass of a supported saver redefines of how that saver stores: the names
    the supported saver's own classes define (not `BaseCheckpointSaver`'s, nor dunder
    names) that a class between them defines again. Empty for a supported saver itself
    and for a type that subclasses none."""
    base = supported_base(saver_type)
    if base is None:
        return []
    shared = set(BaseCheckpointSaver.__mro__)
    stored = {n for k in base.__mro__ if k not in shared for n in vars(k) if not _dunder(n)}
    below = saver_type.__mro__[: saver_type.__mro__.index(base)]
    return sorted({n for k in below for n in vars(k) if n in stored})


def backend_name(saver: BaseCheckpointSaver[Any]) -> str | None:
    """The backend module name for `saver`'s type, or None if unsupported: one of the
    supported savers, or a subclass of one that redefines nothing of how it stores."""
    base = supported_base(type(saver))
    if base is None or store_overrides(type(saver)):
        return None
    return _SUPPORTED[_key(base)]


def _key(saver_type: type) -> tuple[str, str]:
    return saver_type.__module__, saver_type.__name__


def _dunder(name: str) -> bool:
    """A dunder name, or the bookkeeping `ABCMeta` gives every class (`_abc_impl`)."""
    return (name.startswith("__") and name.endswith("__")) or name.startswith("_abc_")


def backend_for(saver: BaseCheckpointSaver[Any]) -> Backend | None:
    """A backend bound to `saver`, or None if its type is not supported."""
    name = backend_name(saver)
    if name is None:
        return None
    module = importlib.import_module(f"retaining_saver.backends.{name}")
    backend: Backend = module.make_backend(saver)
    backend.drift = _upstream.drift(name, saver)
    if backend.drift:
        _warn_drift(type(saver).__name__, backend.drift)
    return backend


_warned: set[tuple[str, ...]] = set()


def _warn_drift(saver_name: str, drift: list[str]) -> None:
    key = (saver_name, *drift)
    if key in _warned:
        return
    _warned.add(key)
    logger.warning(
        "retaining-saver: %s's internals differ from those audited (%s; installed %s, "
        "audited %s): its fast paths are off, and reads go through the saver's own calls",
        saver_name,
        "; ".join(drift),
        _upstream.installed_versions(),
        _upstream.AUDITED_VERSIONS,
    )
