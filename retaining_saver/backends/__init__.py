"""Storage backends: each loads a thread's lineage and carries out plans.

A backend is chosen by the exact type of the wrapped saver. A subclass may
store rows differently, so it is not recognised: no statement of ours ever
reaches a saver whose layout we have not tested.
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


def backend_name(saver: BaseCheckpointSaver[Any]) -> str | None:
    """The backend module name for `saver`'s exact type, or None if unsupported."""
    saver_type = type(saver)
    return _SUPPORTED.get((saver_type.__module__, saver_type.__name__))


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


__all__ = ["Backend", "backend_for", "backend_name"]
