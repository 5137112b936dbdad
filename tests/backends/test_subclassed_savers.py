"""A subclass of a supported saver keeps cleanup unless it changes how the saver stores.

An app subclasses a saver to add a method (LangGraph's Agent Server wants an
`adelete_for_runs` that `AsyncSqliteSaver` lacks), or to set itself up in
`__init__`: it stores exactly as its base, and is wrapped as its base is. A subclass
that redefines anything its base's own classes define (here `put`) may store
otherwise: it is passed through, with a warning that names what it redefined.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from savers import KINDS, open_async

from retaining_saver import RetainingSaver, UnsupportedSaverError
from retaining_saver.testing import awrite_duration_leaf
from retaining_saver.testing.checks import aintegrity
from retaining_saver.testing.graphs import chat_graph, thread, turn


def adding_a_method(base: type) -> type:
    """A subclass of `base` that adds a method and sets itself up in `__init__`."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)
        self.added = True

    def describe(self: Any) -> str:
        return f"an app's {base.__name__}"

    return type(f"App{base.__name__}", (base,), {"__init__": __init__, "describe": describe})


def redefining_put(base: type) -> type:
    """A subclass of `base` that redefines how it writes a checkpoint."""

    def put(self: Any, *args: Any) -> Any:
        return base.put(self, *args)

    return type(f"Putting{base.__name__}", (base,), {"put": put})


def subclassed(inner: Any, make: Any) -> Any:
    """`inner` re-typed as a subclass made by `make`, its state kept."""
    inner.__class__ = make(type(inner))
    return inner


@pytest.mark.parametrize("kind", KINDS)
async def test_a_subclass_that_adds_methods_keeps_cleanup(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        app_saver = subclassed(inner, adding_a_method)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            saver = RetainingSaver(app_saver, strict=True)
        assert saver.cleanup_enabled and saver.describe().startswith("an app's")
        graph = chat_graph(saver)
        await graph.ainvoke(turn(0), {"configurable": {"thread_id": "t", "run_id": "r0"}})
        assert await awrite_duration_leaf(saver, "t") is not None
        await graph.ainvoke(turn(1), {"configurable": {"thread_id": "t", "run_id": "r1"}})
        assert saver.counters.reclaimed == 1
        before = (await graph.aget_state(thread("t"))).values
        await graph.ainvoke(turn(2), {"configurable": {"thread_id": "t", "run_id": "r2"}})
        await saver.adelete_for_runs(["r2"])
        assert (await graph.aget_state(thread("t"))).values == before
        assert (await aintegrity(app_saver, "t")).clean


@pytest.mark.parametrize("kind", KINDS)
async def test_a_subclass_that_redefines_a_write_is_passed_through_by_name(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        app_saver = subclassed(inner, redefining_put)
        with pytest.warns(UserWarning, match=r"redefines put, which .* reads or writes"):
            saver = RetainingSaver(app_saver)
        assert not saver.cleanup_enabled
        with pytest.raises(UnsupportedSaverError):
            RetainingSaver(app_saver, strict=True)
        for name in ("delete_for_runs", "adelete_for_runs", "copy_thread", "acopy_thread"):
            # The wrapper's class advertises what the bare saver's does, and no more.
            assert _lacks(saver, name) == _lacks(app_saver, name), name


def _lacks(saver: Any, name: str) -> bool:
    return getattr(type(saver), name) is getattr(BaseCheckpointSaver, name)
