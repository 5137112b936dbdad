"""A small chat graph for the Agent Server example: no model, deterministic.

`reply` echoes the last message; a message that starts with "slow" makes it wait
first, so that a second run can arrive while it is in flight (the case
`multitask_strategy="rollback"` is for). A message that starts with "ask" makes
`review` interrupt for a human answer.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

SLOW_SECONDS = 5.0


class Chat(TypedDict, total=False):
    said: Annotated[list[str], operator.add]
    turns: int


async def reply(state: Chat) -> dict[str, Any]:
    last = (state.get("said") or ["nothing"])[-1]
    if last.startswith("slow"):
        await asyncio.sleep(SLOW_SECONDS)
    return {"said": [f"echo {last}"], "turns": state.get("turns", 0) + 1}


def route(state: Chat) -> str:
    asked = any(s.startswith("ask") for s in (state.get("said") or [])[-2:-1])
    return "review" if asked else END


def review(state: Chat) -> dict[str, Any]:
    answer = interrupt("review the reply")
    return {"said": [f"human {answer}"]}


builder = StateGraph(Chat)
builder.add_node("reply", reply)
builder.add_node("review", review)
builder.add_edge(START, "reply")
builder.add_conditional_edges("reply", route, ["review", END])
builder.add_edge("review", END)
graph = builder.compile()
