"""A reclaiming admission read answers exactly what the bare saver answers.

Admission reclaims the leaf and hands the run its parent, built from the rows
the reclaiming transaction read (on Postgres, with the blob values of the
leaf, which shares its versions). Whatever the backend builds must equal the
wrapped saver's own unpinned read once the leaf is gone: the same config,
checkpoint, metadata, parent config and pending writes.
"""

from __future__ import annotations

import operator
from enum import Enum
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from savers import KINDS, open_async, open_sync
from spies import Recorder

from retaining_saver import RetainingSaver
from retaining_saver.testing import leaf_of
from retaining_saver.testing.graphs import SHAPES, arun_shape, run_read, run_shape, thread_config

THREAD = "exact"


def _root() -> RunnableConfig:
    return {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}


def _stamp(head: CheckpointTuple | None) -> tuple[Any, Any]:
    """A duration leaf on `head`, written even over an interrupt (some apps do)."""
    assert head is not None
    return leaf_of(head, "run", 1.0)


def _stamp_leaf(stamper: BaseCheckpointSaver[Any]) -> CheckpointTuple:
    head = stamper.get_tuple(_root())
    checkpoint, metadata = _stamp(head)
    assert head is not None
    stamper.put(head.config, checkpoint, metadata, {})
    return head


def _check(answer: CheckpointTuple | None, after: CheckpointTuple | None, parent: Any) -> None:
    assert answer is not None and after is not None
    assert answer.checkpoint["id"] == parent.checkpoint["id"]
    assert answer.config == after.config
    assert answer.checkpoint == after.checkpoint
    assert answer.metadata == after.metadata
    assert answer.parent_config == after.parent_config
    assert answer.pending_writes == after.pending_writes


def _head_reads(kind: str, *, is_async: bool) -> tuple[int, int]:
    """How an admission reads the head: (through the saver, by the backend's own read).

    On Postgres, whoever stamped it, the leaf is taken in the statement that
    reads the head, with no read first. Else the async read on SQLite runs the
    saver's statements itself, and every other read goes through the saver.
    """
    if kind == "postgres":
        return (0, 0)
    return (0, 1) if is_async and kind != "memory" else (1, 0)


@pytest.mark.parametrize("stamped_by", ["another-process", "this-saver"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", KINDS)
def test_reclaiming_read_answers_the_bare_read(
    kind: str, shape: str, stamped_by: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        run_shape(saver, shape, THREAD)
        parent = _stamp_leaf(saver if stamped_by == "this-saver" else inner)
        if shape == "interrupt":
            assert parent.pending_writes, "the parent must own writes for this case"
        reads = Recorder(inner, ["get_tuple"])
        rows = Recorder(saver._backend, ["head_row"] if kind != "memory" else [])
        answer = saver.get_tuple(run_read(THREAD))
        assert saver.counters.reclaimed == 1
        counts = (reads.count("get_tuple"), rows.count("head_row"))
        assert counts == _head_reads(kind, is_async=False)
        _check(answer, inner.get_tuple(_root()), parent)


@pytest.mark.parametrize("stamped_by", ["another-process", "this-saver"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", KINDS)
async def test_reclaiming_read_answers_the_bare_read_async(
    kind: str,
    shape: str,
    stamped_by: str,
    request: pytest.FixtureRequest,
) -> None:
    """On Postgres the leaf is taken as the head is read, in one statement without the
    saver's own read first; the run reads the same."""
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        await arun_shape(saver, shape, THREAD)
        parent = await inner.aget_tuple(_root())
        checkpoint, metadata = _stamp(parent)
        assert parent is not None
        stamper = saver if stamped_by == "this-saver" else inner
        await stamper.aput(parent.config, checkpoint, metadata, {})
        reads = Recorder(inner, ["aget_tuple"])
        rows = Recorder(saver._backend, ["head_row"] if kind != "memory" else [])
        answer = await saver.aget_tuple(run_read(THREAD))
        assert saver.counters.reclaimed == 1
        counts = (reads.count("aget_tuple"), rows.count("head_row"))
        assert counts == _head_reads(kind, is_async=True)
        _check(answer, await inner.aget_tuple(_root()), parent)


class Paint(Enum):
    """A plain Enum: a strict msgpack serializer reads it back as its value, a str."""

    RED = "red"


class Canvas(TypedDict, total=False):
    paint: Paint
    strokes: Annotated[list[str], operator.add]


def _paint_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    builder: Any = StateGraph(Canvas)
    builder.add_node("stroke", lambda state: {"strokes": [f"stroke {len(state['strokes'])}"]})
    builder.add_edge(START, "stroke")
    builder.add_edge("stroke", END)
    return builder.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("stacked", [1, 3])
@pytest.mark.parametrize("stamped_by", ["another-process", "this-saver"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_value_read_back_in_another_type_survives_the_reclaim(
    kind: str, stamped_by: str, stacked: int, request: pytest.FixtureRequest
) -> None:
    """The run reads the parent as the saver reads its own row, whatever the loaded
    value's type says about how it was stored (a blob on Postgres, read back as a str)."""
    with open_sync(kind, request) as inner:
        inner.serde = JsonPlusSerializer(allowed_msgpack_modules=None)
        saver = RetainingSaver(inner)
        _paint_graph(saver).invoke({"paint": Paint.RED, "strokes": []}, thread_config(THREAD))
        parent = inner.get_tuple(_root())
        assert parent is not None
        for _ in range(stacked):
            _stamp_leaf(saver if stamped_by == "this-saver" else inner)
        answer = saver.get_tuple(run_read(THREAD))
        assert saver.counters.reclaimed == stacked
        _check(answer, inner.get_tuple(_root()), parent)
        assert answer is not None
        assert answer.checkpoint["channel_values"]["paint"] == "red"
