"""The drop-in: wrap the checkpointer you already use, and nothing else changes.

    python examples/quickstart.py [PATH]

Runs a few chat turns on a SQLite file (a temporary one unless PATH is given),
stamping each run's duration as an app that records run history does, and
prints what the wrapper reclaimed and what the thread holds. The drop-in only
reclaims such stamps; see examples/nightly_maintenance.py for bounding history.
"""

from __future__ import annotations

import logging
import operator
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Annotated, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph

from retaining_saver import RetainingSaver
from retaining_saver.testing import write_duration_leaf


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def reply(state: State) -> State:
    return {"messages": [f"echo: {state['messages'][-1]}"]}


def main(path: Path, turns: int = 3) -> dict[str, int]:
    """Chat `turns` times on thread "t1" of the SQLite file at `path`; return what stayed."""
    conn = sqlite3.connect(path, check_same_thread=False)
    checkpointer = RetainingSaver(SqliteSaver(conn))  # was: SqliteSaver(conn)
    checkpointer.setup()
    graph = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
    app = graph.compile(checkpointer=checkpointer)
    config: RunnableConfig = {"configurable": {"thread_id": "t1"}}
    for turn in range(turns):
        app.invoke({"messages": [f"message {turn}"]}, config)
        # What an app that records run history writes after a run: a metadata-only
        # copy of the head. The next run's admission reclaims it.
        write_duration_leaf(checkpointer, "t1", run_id=f"run-{turn}", seconds=0.2)
    print("state:", app.get_state(config).values["messages"][-2:])
    print("counters:", checkpointer.counters)
    stats = checkpointer.storage_stats("t1")
    print("thread t1:", {name: t.rows for name, t in stats.tables.items()}, f"{stats.bytes:,} B")
    conn.close()
    return {
        "reclaimed": checkpointer.counters.reclaimed,
        "checkpoints": stats.tables["checkpoints"].rows,
    }


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # one line a reclaim
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as directory:
            main(Path(directory) / "checkpoints.sqlite")
