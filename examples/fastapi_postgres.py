"""Async Postgres in a FastAPI app: the saver opened in the lifespan, wrapped once.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        uvicorn examples.fastapi_postgres:app      # or: python examples/fastapi_postgres.py

The lifespan opens `AsyncPostgresSaver.from_conn_string` (an autocommit
connection, which `acreate_retention_indexes` needs), runs the saver's own
`setup()` and the wrapper's index once, and keeps one `RetainingSaver` for
every request. `POST /threads/{id}/messages` runs a chat turn and then stamps
the run's duration; the next turn's admission reclaims that stamp.
`GET /threads/{id}/stats` answers `astorage_stats`.
"""

from __future__ import annotations

import operator
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

from fastapi import FastAPI, Request
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, copy_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, StateGraph
from pydantic import BaseModel

from retaining_saver import RetainingSaver


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


class Message(BaseModel):
    text: str


def reply(state: State) -> State:
    return {"messages": [f"echo: {state['messages'][-1]}"]}


async def stamp_run_duration(
    saver: BaseCheckpointSaver[Any], config: RunnableConfig, run_id: str, seconds: float
) -> None:
    """Record a run's duration as run-history apps do: a metadata-only copy of the head."""
    head = await saver.aget_tuple(config)
    if head is None:
        return
    checkpoint = copy_checkpoint(head.checkpoint)
    checkpoint["id"], checkpoint["ts"] = str(uuid6(clock_seq=-1)), datetime.now(UTC).isoformat()
    durations = {**(head.metadata.get("run_durations") or {}), run_id: seconds}
    metadata: Any = {
        "source": "update",
        "step": head.metadata.get("step", -1) + 1,
        "parents": head.metadata.get("parents", {}),
        "run_durations": durations,
    }
    await saver.aput(head.config, checkpoint, metadata, {})


def create_app(dsn: str) -> FastAPI:
    """The app, storing its threads in the Postgres database at `dsn`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncPostgresSaver.from_conn_string(dsn) as inner:
            await inner.setup()
            saver = RetainingSaver(inner)  # was: inner
            await saver.acreate_retention_indexes()
            graph = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
            app.state.saver = saver
            app.state.graph = graph.compile(checkpointer=saver)
            yield

    app = FastAPI(lifespan=lifespan)

    @app.post("/threads/{thread_id}/messages")
    async def post_message(thread_id: str, message: Message, request: Request) -> dict[str, Any]:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        started = time.perf_counter()
        state = await request.app.state.graph.ainvoke({"messages": [message.text]}, config)
        seconds = time.perf_counter() - started
        await stamp_run_duration(request.app.state.saver, config, str(uuid6()), seconds)
        return {"reply": state["messages"][-1]}

    @app.get("/threads/{thread_id}/stats")
    async def thread_stats(thread_id: str, request: Request) -> dict[str, Any]:
        saver: RetainingSaver = request.app.state.saver
        stats = await saver.astorage_stats(thread_id)
        tables = {name: {"rows": t.rows, "bytes": t.bytes} for name, t in stats.tables.items()}
        return {"tables": tables, "reclaimed": saver.counters.reclaimed}

    return app


DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

if __name__ == "__main__":
    import uvicorn  # not a dependency of this project: pip install uvicorn

    uvicorn.run(create_app(DSN))
else:
    app = create_app(DSN)
