"""`delete_for_runs` on checkpoints written before format 4 (`v` < 4).

Such a checkpoint reads its pending sends from its parent's `__pregel_tasks` writes
(the Postgres saver moves them into its read), so grafting it onto another parent would
change what it reads. A removal fails closed: a removed run's checkpoint that a kept
pre-v4 checkpoint reads its sends from stays (`pre-v4-sends`), and the call says so in a
warning. At format 4 the same removal goes through.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import TASKS
from langgraph.types import Send
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import thread

RUNS = ["run-0", "run-mid", "run-mid", "run-last"]
"""The run of each step: the middle run's two checkpoints own a Send each."""


def steps(version: int) -> Iterator[tuple[Any, Any, Any, list[Any]]]:
    """Each put of steps 0 to 3 in format `version`, each naming its run, as a saver of
    that time put them: checkpoint, metadata, new versions and its writes (steps 1 and 2
    own `__pregel_tasks` writes)."""
    for step, run_id in enumerate(RUNS):
        checkpoint = empty_checkpoint()
        checkpoint["v"] = version
        checkpoint["channel_values"] = {"count": step}
        checkpoint["channel_versions"] = {"count": f"{step + 1:032}.0"}
        metadata: Any = {"source": "loop", "step": step, "parents": {}, "run_id": run_id}
        sends = [(TASKS, Send("fan", {"step": step}))] if step in (1, 2) else []
        yield checkpoint, metadata, dict(checkpoint["channel_versions"]), sends


def write_thread(saver: Any, thread_id: str, version: int) -> list[str]:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for checkpoint, metadata, versions, sends in steps(version):
        config = saver.put(config, checkpoint, metadata, versions)
        if sends:
            saver.put_writes(config, sends, f"task-{metadata['step']}")
    return [t.checkpoint["id"] for t in saver.list(thread(thread_id))][::-1]


def read(saver: Any, thread_id: str, checkpoint_id: str) -> Any:
    found = saver.get_tuple(thread(thread_id, checkpoint_id))
    checkpoint = {k: v for k, v in found.checkpoint.items() if k not in ("id", "ts")}
    return checkpoint, found.pending_writes


def listed(saver: Any, thread_id: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread(thread_id))]


@pytest.mark.parametrize("kind", KINDS)
def test_a_pre_v4_checkpoint_keeps_the_removed_parents_it_reads_its_sends_from(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        old, new = write_thread(inner, "old", 3), write_thread(inner, "new", 4)
        before = {i: read(inner, "old", i) for i in old}
        if kind == "postgres":  # the saver that migrates them: the head reads its sends
            assert before[old[3]][0]["channel_values"][TASKS] == [Send("fan", {"step": 2})]
        with caplog.at_level(logging.WARNING, logger="retaining_saver"):
            saver.delete_for_runs(["run-mid"])
        assert listed(inner, "old") == list(reversed(old))  # nothing went
        assert {i: read(inner, "old", i) for i in old} == before
        assert "pre-v4-sends: 2" in caplog.text and "old" in caplog.text
        assert listed(inner, "new") == [new[3], new[0]]  # format 4: the run went
        assert (
            inner.get_tuple(thread("new")).parent_config["configurable"]["checkpoint_id"]
            == (new[0])
        )
        assert integrity(inner, "old").clean and integrity(inner, "new").clean
        saver.delete_for_runs(["run-last"])  # a leaf: nothing reads its writes
        assert listed(inner, "old") == list(reversed(old[:3]))


@pytest.mark.parametrize("kind", KINDS)
async def test_async_pre_v4_removal_fails_closed(kind: str, request: pytest.FixtureRequest) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        config: Any = {"configurable": {"thread_id": "old", "checkpoint_ns": ""}}
        for checkpoint, metadata, versions, sends in steps(3):
            config = await inner.aput(config, checkpoint, metadata, versions)
            if sends:
                await inner.aput_writes(config, sends, f"task-{metadata['step']}")
        ids = [t.checkpoint["id"] async for t in inner.alist(thread("old"))][::-1]
        await saver.adelete_for_runs(["run-mid"])
        assert [t.checkpoint["id"] async for t in inner.alist(thread("old"))] == ids[::-1]
        assert (await aintegrity(inner, "old")).clean
