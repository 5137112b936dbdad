"""A DeerFlow-shaped gateway: explicit admission under the gateway's own thread lock.

    python examples/gateway_explicit.py [PATH]

Some gateways already serialize the runs of a thread themselves (DeerFlow's
run manager holds a lock per thread while a run is in flight) and stamp each
run's duration into the thread after it ends (`persist_run_durations`: a
metadata-only copy of the head). There the wrapper should clean up exactly once
per run, at a point the gateway chooses, inside that lock: `admission="explicit"`
and `aadmit(thread_id)` before the run starts.

The gateway gets its saver from a checkpointer factory (an async context
manager, as DeerFlow's `make_checkpointer` is) and wraps what it yields; the
graph and the rest of the gateway are unchanged.
"""

from __future__ import annotations

import asyncio
import operator
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, copy_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph

from retaining_saver import RetainingSaver


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def agent(state: State) -> State:
    return {"messages": [f"answer to: {state['messages'][-1]}"]}


@asynccontextmanager
async def make_checkpointer(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The app's checkpointer factory (unchanged): it knows nothing of retention."""
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()
        yield saver


class Gateway:
    """Runs agent turns, one at a time per thread, and records each run's duration."""

    def __init__(self, checkpointer: BaseCheckpointSaver[Any]) -> None:
        # The one change: wrap the factory's saver, cleaning up only when told to.
        self.saver = RetainingSaver(checkpointer, admission="explicit")
        builder = StateGraph(State).add_node("agent", agent).add_edge(START, "agent")
        self.graph = builder.compile(checkpointer=self.saver)
        self.thread_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def run(self, thread_id: str, text: str) -> str:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        async with self.thread_locks[thread_id]:  # no other run of this thread is in flight
            await self.saver.aadmit(thread_id)  # reclaims the previous run's stamp
            run_id, started = str(uuid6()), time.perf_counter()
            state = await self.graph.ainvoke({"messages": [text]}, config)
            await self.persist_run_duration(config, run_id, time.perf_counter() - started)
        return str(state["messages"][-1])

    async def persist_run_duration(
        self, config: RunnableConfig, run_id: str, seconds: float
    ) -> None:
        """DeerFlow-style: copy the head with the run's duration added to its metadata."""
        head = await self.saver.aget_tuple(config)
        if head is None:
            return
        checkpoint = copy_checkpoint(head.checkpoint)
        checkpoint["id"] = str(uuid6(clock_seq=-1))
        checkpoint["ts"] = datetime.now(UTC).isoformat()
        metadata: Any = {
            **head.metadata,
            "source": "update",
            "step": head.metadata.get("step", -1) + 1,
            "run_durations": {**(head.metadata.get("run_durations") or {}), run_id: seconds},
        }
        await self.saver.aput(head.config, checkpoint, metadata, {})

    async def history_length(self, thread_id: str) -> int:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        return len([c async for c in self.saver.alist(config)])


async def main(path: Path, turns: int = 4) -> Gateway:
    """Serve `turns` turns on each of two threads at once; print what stayed."""
    async with make_checkpointer(path) as checkpointer:
        gateway = Gateway(checkpointer)
        for turn in range(turns):
            await asyncio.gather(
                gateway.run("alice", f"question {turn}"), gateway.run("bob", f"question {turn}")
            )
        for thread_id in ("alice", "bob"):
            print(thread_id, "checkpoints:", await gateway.history_length(thread_id))
        print("stamps reclaimed:", gateway.saver.counters.reclaimed)
        return gateway


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(Path(sys.argv[1])))
    else:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(main(Path(directory) / "gateway.sqlite"))
