"""`retaining-saver demo`: one small chat, stored bare and under each way of bounding growth.

The same chat (a two-node graph, a stamp of the run's duration after every
turn, as DeerFlow's gateway writes it) runs on six threads of one SQLite file:

- bare: the `SqliteSaver` alone; every super-step and every stamp stays.
- drop-in: `RetainingSaver(SqliteSaver(conn))`; each next run's admission
  reclaims the stamp before it (the last one stays until the next run).
- compact_steps: the drop-in thread, then one engine pass of step compaction
  (each run keeps its input, first and last super-step).
- history_keep_runs: the drop-in thread, then one engine pass of the history
  horizon (the newest runs stay, older ones go).
- as-used: `RetainingSaver(SqliteSaver(conn), retention=...)` with the same
  horizon: no engine call; each run's admission applies it as the chat goes.
- prune: the drop-in thread, then `prune(strategy="keep_latest")`.

It prints rows and bytes per thread against the bare thread, and checks that
every thread ends in the same state. No LLM, no network.
"""

from __future__ import annotations

import argparse
import operator
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TextIO, TypedDict

from langchain_core.runnables import RunnableConfig

from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._saver import RetainingSaver
from retaining_saver.testing.leaves import write_duration_leaf

TURNS = 12
KEEP_RUNS = 3
WORDS_PER_TURN = 40

# A deployment gives days (a client may still hold an old id); the demo's
# checkpoints are all a few milliseconds old.
MIN_AGE = timedelta(0)
COMPACTION = RetentionPolicy(compact_steps=True, history_min_age=MIN_AGE)
HORIZON = RetentionPolicy(history_keep_runs=KEEP_RUNS, history_min_age=MIN_AGE)


class ChatState(TypedDict):
    messages: Annotated[list[str], operator.add]


def _think(state: ChatState) -> dict[str, list[str]]:
    return {"messages": [f"(thinking about: {state['messages'][-1][:30]}...)"]}


def _answer(state: ChatState) -> dict[str, list[str]]:
    question = state["messages"][-2]
    return {"messages": [f"echo of {len(question.split())} words: {question}"]}


def chat_graph(checkpointer: Any) -> Any:
    """`START -> think -> answer`: four checkpoints a turn (input, two steps, end)."""
    from langgraph.graph import START, StateGraph

    builder = StateGraph(ChatState)
    builder.add_node("think", _think)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    return builder.compile(checkpointer=checkpointer)


def user_message(turn: int) -> str:
    """A deterministic user message of `WORDS_PER_TURN` words."""
    words = [f"word{(turn * 7 + i * 13) % 97}" for i in range(WORDS_PER_TURN)]
    return f"turn {turn}: " + " ".join(words)


@dataclass(frozen=True)
class Way:
    """One way of storing the chat: a thread, what is done to it, what it keeps."""

    thread_id: str
    label: str
    keeps: str
    after: Callable[[RetainingSaver, str], object] | None
    wrapped: bool = True
    retention: RetentionPolicy | None = None


WAYS: tuple[Way, ...] = (
    Way("bare", "bare SqliteSaver", "every step and stamp", None, wrapped=False),
    Way("drop-in", "drop-in (admission)", "every step; stamps go", None),
    Way(
        "compacted",
        "+ compact_steps",
        "each run's input, first, last",
        lambda saver, tid: saver.enforce_thread_retention(tid, COMPACTION),
    ),
    Way(
        "horizon",
        f"+ history_keep_runs={KEEP_RUNS}",
        f"the newest {KEEP_RUNS} runs",
        lambda saver, tid: saver.enforce_thread_retention(tid, HORIZON),
    ),
    Way(
        "as-used",
        f"retention= (keep_runs={KEEP_RUNS})",
        f"about the newest {KEEP_RUNS} runs, no job",
        None,
        retention=HORIZON,
    ),
    Way("prune", "+ prune(keep_latest)", "the latest checkpoint", lambda s, t: s.prune([t])),
)


@dataclass(frozen=True)
class Row:
    """What one way left of the chat."""

    way: Way
    checkpoints: int
    writes: int
    bytes: int
    same_state: bool


def _chat(graph: Any, saver: Any, thread_id: str, turns: int) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    for turn in range(turns):
        graph.invoke({"messages": [user_message(turn)]}, config)
        write_duration_leaf(saver, thread_id, run_id=f"run-{turn}", seconds=0.5 + turn)


def run(path: Path, turns: int = TURNS, say: Callable[[str], None] = print) -> list[Row]:
    """Write the chat once per way into the SQLite file at `path`; measure each thread.

    Args:
        path: The database file; created if missing.
        turns: Chat turns per thread.
        say: Where progress lines go.

    Returns:
        One `Row` per way, in `WAYS` order.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    with _connect(path) as conn:
        inner = SqliteSaver(conn)
        inner.setup()
        saver = RetainingSaver(inner)
        states = {}
        for way in WAYS:
            say(f"  {way.label}: {turns} turns on thread {way.thread_id!r}")
            checkpointer = _checkpointer(way, inner, saver)
            graph = chat_graph(checkpointer)
            _chat(graph, checkpointer, way.thread_id, turns)
            if way.after is not None:
                way.after(saver, way.thread_id)
            config: RunnableConfig = {"configurable": {"thread_id": way.thread_id}}
            states[way.thread_id] = graph.get_state(config).values
        return [_measured(saver, way, states[way.thread_id] == states["bare"]) for way in WAYS]


def _checkpointer(way: Way, inner: Any, saver: RetainingSaver) -> Any:
    """The saver a way's chat runs on: the bare one, the drop-in, or its own wrapper."""
    if not way.wrapped:
        return inner
    if way.retention is not None:
        return RetainingSaver(inner, retention=way.retention)
    return saver


@contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield conn
    finally:
        conn.close()


def _measured(saver: RetainingSaver, way: Way, same_state: bool) -> Row:
    stats = saver.storage_stats(way.thread_id)
    tables = stats.tables
    checkpoints, writes = tables["checkpoints"].rows, tables["writes"].rows
    return Row(way, checkpoints, writes, stats.bytes, same_state)


def table(rows: Sequence[Row]) -> list[str]:
    """The before/after table, 80 columns wide."""
    bare = rows[0]
    lines = [
        f"{'way':<26}{'checkpoints':>12}{'writes':>8}{'bytes':>10}{'x bare':>8}  keeps",
        "-" * 78,
    ]
    for row in rows:
        ratio = row.bytes / bare.bytes if bare.bytes else 0.0
        lines.append(
            f"{row.way.label:<26}{row.checkpoints:>12}{row.writes:>8}{row.bytes:>10,}"
            f"{ratio:>8.2f}  {row.way.keeps}"
        )
    return lines


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the demo; print what it does and the table. Returns the exit status.

    A reader that stops reading (`retaining-saver demo | head -3`) ends the demo
    quietly, with status 0.
    """
    try:
        return _main(argv, out)
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at nothing so that is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None, out: TextIO | None) -> int:
    parser = argparse.ArgumentParser(
        prog="retaining-saver demo",
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=TURNS, metavar="N")
    parser.add_argument(
        "--keep", type=Path, metavar="PATH", help="write to this SQLite file and keep it"
    )
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error(f"argument --turns: must be >= 1, got {args.turns}")
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep}: the file exists; name a new one")

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    with tempfile.TemporaryDirectory() as directory:
        path = args.keep or Path(directory) / "demo.sqlite"
        say(f"A {args.turns}-turn chat, stamped after each turn, on {path}:")
        try:
            rows = run(path, args.turns, say)
        except ImportError as error:  # an install without the [sqlite] extra
            parser.exit(1, f"{parser.prog}: error: {error}; pip install -e '.[sqlite]'\n")
        say("")
        for line in table(rows):
            say(line)
        say("")
        same = all(row.same_state for row in rows)
        say(f"every thread ends in the same state as the bare one: {'yes' if same else 'NO'}")
        say("The drop-in alone removes only the stamps; history rules and prune bound growth.")
        if args.keep:
            say(f"Look closer: retaining-saver stats sqlite:///{path}")
    return 0 if same else 1
