"""Three chat turns on a StateGraph checkpointed by RetainingSaver over SQLite.

After each turn the app stamps the run's duration the way DeerFlow does (a
metadata-only copy of the head); the next run's admission reclaims it, so one
stamp is left at the end instead of three.
"""

from __future__ import annotations

import operator
import sqlite3
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


def chat(state: State) -> State:
    """Answer the latest message by echoing it (no LLM involved)."""
    return {"messages": [f"echo: {state['messages'][-1]}"]}


def main() -> None:
    """Run three turns on one thread and report what the saver holds."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "demo.sqlite", check_same_thread=False)
        checkpointer = RetainingSaver(SqliteSaver(conn))
        builder = StateGraph(State).add_node("chat", chat).add_edge(START, "chat")
        graph = builder.compile(checkpointer=checkpointer)
        config: RunnableConfig = {"configurable": {"thread_id": "demo"}}
        for turn, text in enumerate(("hello", "how are you?", "bye")):
            graph.invoke({"messages": [text]}, config)
            write_duration_leaf(checkpointer, "demo", run_id=f"run-{turn}", seconds=0.1)
        print("final state:", graph.get_state(config).values)
        print("checkpoints:", len(list(checkpointer.list(config))))
        print("duration stamps reclaimed at admission:", checkpointer.counters.reclaimed)
        report = checkpointer.enforce_thread_retention("demo", dry_run=True)
        print("the engine would also delete:", sorted(r.value for r in report.deleted.values()))
        conn.close()


if __name__ == "__main__":
    main()
