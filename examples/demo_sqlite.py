"""Three chat turns on a StateGraph checkpointed by RetainingSaver over SQLite."""

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
        for text in ("hello", "how are you?", "bye"):
            graph.invoke({"messages": [text]}, config)
        print("final state:", graph.get_state(config).values)
        print("checkpoints:", len(list(checkpointer.list(config))))
        conn.close()


if __name__ == "__main__":
    main()
