"""Frames from a cleanup flow's statement to the driver's `execute`, on one admission read.

    python scripts/statement_frames.py [--dsn postgresql://postgres@127.0.0.1:5432/test]

Opens an `AsyncPostgresSaver` on a fresh database (dropped afterwards), puts
one checkpoint, wraps the saver, and makes one unpinned `aget_tuple` admission
read with psycopg's `AsyncCursor.execute` replaced by a spy that keeps the
stack of the first statement. A flow is a suspended generator, off the stack
while its statement runs; what the statement climbs is the frames from the
flow's driver (`adrive`, which sends the flow each answer) to `execute`. The
figure is those frames, `execute` included; issue #20 asks for at most 3.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import traceback
import uuid
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from retaining_saver import RetainingSaver
from retaining_saver._run_reads import RUNTIME_KEY

DRIVERS = frozenset({"adrive", "drive"})
"""The functions that send a flow its answers, in `retaining_saver/_effects.py`."""


async def first_statement_stack(dsn: str) -> traceback.StackSummary:
    """The stack of the admission read's statement on a one-checkpoint thread."""
    async with AsyncPostgresSaver.from_conn_string(dsn) as inner:
        await inner.setup()
        root: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        await inner.aput(root, empty_checkpoint(), {"source": "input", "step": -1}, {})
        saver = RetainingSaver(inner)
        stacks: list[traceback.StackSummary] = []
        real = psycopg.AsyncCursor.execute

        async def spy(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            # The reclaim records' table is created before a first write: not the read.
            if "CREATE TABLE" not in str(query):
                stacks.append(traceback.extract_stack())
            return await real(cursor, query, *args, **kwargs)

        psycopg.AsyncCursor.execute = spy  # type: ignore[assignment, method-assign]
        try:
            config: RunnableConfig = {
                "configurable": {**root["configurable"], RUNTIME_KEY: object()}
            }
            await saver.aget_tuple(config)
        finally:
            psycopg.AsyncCursor.execute = real  # type: ignore[method-assign]
        return stacks[0]


def frames_from_driver(stack: traceback.StackSummary) -> traceback.StackSummary:
    """The frames above the innermost flow driver, up to and including `execute`."""
    drivers = [
        index
        for index, frame in enumerate(stack)
        if frame.name in DRIVERS and frame.filename.endswith("_effects.py")
    ]
    if not drivers:
        raise SystemExit("no flow driver on the stack: is the read an admission?")
    return traceback.StackSummary.from_list(stack[drivers[-1] :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    name = f"frames_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = args.dsn.rsplit("/", 1)[0] + "/" + name
        stack = frames_from_driver(asyncio.run(first_statement_stack(dsn)))
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    for frame in stack:
        where = frame.filename.split("site-packages/")[-1].split("/work/wt/flows/")[-1]
        print(f"  {where}:{frame.lineno} {frame.name}: {frame.line}")
    print(f"frames from the flow's driver to execute: {len(stack) - 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
