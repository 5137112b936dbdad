"""Which reads of a checkpoint saver admit a LangGraph run, and which checkpoint ids a
run's config addresses (and so protects while it runs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from retaining_saver._lru import BoundedLru

# LangGraph marks the reads of its run loop with this `configurable` key;
# tests/admission/test_admission_bounds.py (test_runtime_key_is_langgraphs) pins it against
# the installed LangGraph.
RUNTIME_KEY = "__pregel_runtime"


def run_selectors(config: RunnableConfig) -> frozenset[str]:
    """Checkpoint ids a run's config addresses: its `checkpoint_id` and `checkpoint_map`."""
    configurable = config.get("configurable", {})
    ids = set(map_selectors(config))
    if checkpoint_id := configurable.get("checkpoint_id"):
        ids.add(str(checkpoint_id))
    return frozenset(ids)


def map_selectors(config: RunnableConfig) -> frozenset[str]:
    """The ids a run's `checkpoint_map` addresses (its parent graphs' checkpoints)."""
    checkpoint_map = config.get("configurable", {}).get("checkpoint_map")
    if not isinstance(checkpoint_map, Mapping):
        return frozenset()
    return frozenset(str(v) for v in checkpoint_map.values() if v)


RUNS_TRACKED = 1024
"""How many runs' runtime objects `RunTracker` keeps alive, the most recent first."""


class RunTracker:
    """Tells a run's first checkpoint read from its later ones.

    A run pinned to a `checkpoint_id` also reads "latest" later (to see whether
    its target was superseded); only a run whose *first* read is unpinned is
    being admitted. Runs are told apart by their runtime object; the most
    recent `size` are remembered, strongly, so an id is never reused while kept
    (a LangGraph `Runtime` takes no weak reference). So each keeps its run's
    `context` alive until `size` newer runs have read through the saver (README,
    "What it keeps in memory").
    """

    def __init__(self, size: int = RUNS_TRACKED) -> None:
        self._seen: BoundedLru[int, Any] = BoundedLru(size)

    def first_read(self, runtime: Any) -> bool:
        return self._seen.put(id(runtime), runtime) is not runtime


def is_admission_read(config: RunnableConfig, runs: RunTracker) -> bool:
    """Whether `config` is the first read of a LangGraph run in the root graph.

    A run pinned to a `checkpoint_id` (a regenerate, a resume from a held id)
    is admitted too: the thread's trailing stamp is as redundant as before any
    run, and the thread without stamps never had it. A run pinned to the stamp
    itself then starts from its clone, which holds the same state, as the
    stamp's id resolves there; its `checkpoint_map` selectors are protected.
    """
    configurable = config.get("configurable", {})
    runtime = configurable.get(RUNTIME_KEY)
    if runtime is None:
        return False
    return runs.first_read(runtime) and not configurable.get("checkpoint_ns", "")


def is_pinned(config: RunnableConfig) -> bool:
    """Whether `config` names a `checkpoint_id`."""
    return bool(config.get("configurable", {}).get("checkpoint_id"))
