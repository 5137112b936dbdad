"""The runs `bench_bounding.py` times: its policy, how a figure is read from side-by-side
times (the ratio of medians and of means, `both`), and the whole-run figures (e), (f)
and (g), whose chats each start a fresh pair of threads. See `bench_bounding.py` for
what each figure measures and its goal."""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import statistics
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import _bench_stores as stores
import _common
import bench_admission as admission
import bench_storage as storage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver._rooms import slack_runs
from retaining_saver.testing.graphs import build_chat_graph, chat_graph, chat_turn, thread, turn

HORIZON = 10
RETENTION = RetentionPolicy(history_keep_runs=HORIZON, history_min_age=timedelta(0))
MODEL_SECONDS = 0.02


def frozen_label(frozen: bool) -> str:
    return ", objects frozen" if frozen else ""


async def whole_runs(
    kind: str,
    label: str,
    reps: int,
    calls: dict[str, Any],
    inner: BaseCheckpointSaver[Any],
    frozen: bool,
    saver: RetainingSaver | None = None,
) -> dict[str, list[float]]:
    """`side_by_side` for the whole-run rows ((c), (c) sync, (f), (g), (h)), printing the
    full collections each side paid: one of the whole heap costs tens of ms, several
    runs' worth, wherever it falls. With
    `saver` (the wrapped side's), also how the wrapped runs whose admission ran a pass
    and the others compare with the bare runs (`pass_split`)."""
    paid: dict[str, list[float]] = {}
    passed: list[bool] = []
    counted = 0 if saver is None else saver.counters.history_passes

    def note_pass(name: str, result: Any) -> None:
        # Read after the timed call: whether the wrapped run's admission ran a pass.
        nonlocal counted
        if saver is not None and name == "wrapped":
            passes = saver.counters.history_passes
            passed.append(passes > counted)
            counted = passes

    times = await admission.side_by_side(
        reps, calls, check=note_pass, growing=inner, paid=paid, frozen=frozen
    )
    sides = ", ".join(f"{name} {len(ms)} ({sum(ms):.0f} ms)" for name, ms in sorted(paid.items()))
    print(f"{kind}: {label}: full collections in the timed runs: {sides}")
    if saver is not None:
        print(f"{kind}: {label}: {pass_split(times, passed)}")
    return times


def pass_split(times: dict[str, list[float]], passed: list[bool]) -> str:
    """The wrapped runs whose admission ran a pass, and the others, each as the ratio of
    their median to the bare runs' median: where a whole run's excess comes from (the
    mean's share of the passes is the first ratio less 1, over the slack cycle)."""
    wrapped, bare = times["wrapped"], times["bare"]
    marks = passed[-len(wrapped) :]  # the warmup's runs were checked, not kept
    with_pass = [t for t, ran in zip(wrapped, marks, strict=True) if ran]
    without = [t for t, ran in zip(wrapped, marks, strict=True) if not ran]
    base = _common.median(bare)

    def ratio(runs: list[float]) -> str:
        return f"{_common.median(runs) / base:.3f}x" if runs else "-"

    return (
        f"runs whose admission ran a pass: {len(with_pass)}, median {ratio(with_pass)} the "
        f"bare median; the others: {len(without)}, {ratio(without)}"
    )


def both(
    kind: str,
    what: str,
    times: dict[str, list[float]],
    goal: float,
    mean: str = "mean (amortised)",
) -> list[Any]:
    """The ratio of medians (a typical admission) and the ratio of means (what admissions
    cost on average, passes included), side by side with the bare calls."""
    wrapped, bare = times["wrapped"], times["bare"]
    median = admission.figure(kind, f"{what}, median", wrapped, bare, goal)
    # Paired over windows of one slack cycle (each holds one pass): amortised ratios.
    cycle = slack_runs(HORIZON) + 1
    windows = [
        sum(wrapped[i : i + cycle]) / sum(bare[i : i + cycle])
        for i in range(0, len(wrapped) - cycle + 1, cycle)
    ]
    ratio = statistics.fmean(wrapped) / statistics.fmean(bare)
    paired = (_common.quantile(windows, 0.25), _common.median(windows))
    mean = admission.Figure(
        kind,
        f"{what}, {mean}",
        ratio,
        (*paired, _common.quantile(windows, 0.75)),
        statistics.fmean(wrapped),
        statistics.fmean(bare),
        goal,
        len(windows),
    )
    return [median, mean]


async def sync_run_figure(
    kind: str, inner: BaseCheckpointSaver[Any], reps: int, frozen: bool
) -> Any:
    """(c) on the store's sync saver (`_bench_stores.sync_twin`): `invoke` on a fresh pair
    of threads at the horizon, where the admission runs its pass before it answers, and
    LangGraph stores a sync run's checkpoints from a thread of its own."""
    async with stores.sync_twin(inner) as twin:
        saver = RetainingSaver(twin, retention=RETENTION)
        wrapped, bare = chat_graph(saver), chat_graph(twin)
        for i in range(HORIZON):
            wrapped.invoke(turn(i), thread("sync-wrapped"))
            bare.invoke(turn(i), thread("sync-bare"))
        runs = iter(range(HORIZON, 10**9))

        async def wrapped_run() -> None:
            wrapped.invoke(turn(next(runs)), thread("sync-wrapped"))

        async def bare_run() -> None:
            bare.invoke(turn(next(runs)), thread("sync-bare"))

        label = f"(c) sync, a whole run at the horizon{frozen_label(frozen)}"
        calls = {"wrapped": wrapped_run, "bare": bare_run}
        times = await whole_runs(kind, label, reps, calls, inner, frozen, saver)
        return both(kind, f"{label}: wrapped / bare", times, 1.1)[1]


class _Said(TypedDict, total=False):
    said: Annotated[list[str], operator.add]


async def _model(state: _Said) -> _Said:
    await asyncio.sleep(MODEL_SECONDS)  # a model call: the run waits, the process does not
    return {"said": ["x" * 2000]}


async def model_figure(kind: str, inner: BaseCheckpointSaver[Any]) -> Any:
    """(e): a run whose one node awaits `MODEL_SECONDS`, at a horizon of 4 runs (a pass
    every 3 runs): the runs whose admission ran a pass over the others."""
    saver = RetainingSaver(inner, retention=dataclasses.replace(RETENTION, history_keep_runs=4))
    graph = StateGraph(_Said)
    graph.add_node("model", _model)
    graph.add_edge(START, "model")
    graph.add_edge("model", END)
    app = graph.compile(checkpointer=saver)
    passing: list[float] = []
    others: list[float] = []
    for i in range(60):
        passes = saver.counters.history_reclaimed
        elapsed, _ = await admission.timed(lambda i=i: app.ainvoke({"said": [str(i)]}, thread("e")))
        await saver.asettle_history()  # untimed: it finished before the run's first write
        (passing if saver.counters.history_reclaimed > passes else others).append(elapsed)
    what = f"(e) {MODEL_SECONDS * 1000:.0f} ms node: runs with a pass / without ({len(passing)})"
    return admission.figure(kind, what, passing, others[-len(passing) :], None, "us")


MESSAGE_TURNS = 100
STATE_TURNS = 50


@dataclasses.dataclass(frozen=True)
class Chat:
    """A chat whose whole runs (f), (g) and (h) time: its figure's letter (which also names
    its threads), what it is, its graph, its turns, where it starts, the wrapper's policy."""

    figure: str
    what: str
    graph: Callable[[BaseCheckpointSaver[Any]], Any]
    turn: Callable[[int], dict[str, Any]]
    turns_in: int
    reps: Callable[[int], int] = lambda reps: reps
    policy: RetentionPolicy = RETENTION

    @property
    def label(self) -> str:
        return f"({self.figure}) {self.what} {self.turns_in} turns in"


MESSAGES = Chat("f", "a message chat", build_chat_graph, chat_turn, MESSAGE_TURNS)
STATE = Chat(
    "g",
    "the storage chat",
    chat_graph,
    storage.user_turn,
    STATE_TURNS,
    lambda reps: max(30, reps // 4),  # each run writes the whole state: a few MB at the end
)
TTL_TURNS = 300
UNDER_TTL = Chat(
    "h",
    "the chat under an hour's TTL,",
    chat_graph,
    turn,
    TTL_TURNS,
    policy=dataclasses.replace(RETENTION, history_min_age=timedelta(hours=1)),
)


async def chat_figure(
    kind: str,
    inner: BaseCheckpointSaver[Any],
    reps: int,
    chat: Chat,
    how: str = "",
    frozen: bool = False,
) -> Any:
    """(f), (g), (h): (c)'s whole runs for `chat`, `chat.turns_in` turns in, on a fresh pair
    of threads; `how` names the conditions, if not the store's own."""
    saver = RetainingSaver(inner, retention=chat.policy)
    wrapped, bare = chat.graph(saver), chat.graph(inner)
    wrapped_thread = thread(f"{chat.figure}-wrapped{how}")
    bare_thread = thread(f"{chat.figure}-bare{how}")
    for i in range(chat.turns_in):
        await wrapped.ainvoke(chat.turn(i), wrapped_thread)
        await bare.ainvoke(chat.turn(i), bare_thread)
    await saver.asettle_history()
    runs = iter(range(chat.turns_in, 10**9))

    async def wrapped_run() -> None:
        await wrapped.ainvoke(chat.turn(next(runs)), wrapped_thread)
        await saver.asettle_history()

    label = f"{chat.label}{how}{frozen_label(frozen)}"
    calls = {
        "wrapped": wrapped_run,
        "bare": lambda: bare.ainvoke(chat.turn(next(runs)), bare_thread),
    }
    times = await whole_runs(kind, label, chat.reps(reps), calls, inner, frozen, saver)
    return both(kind, f"{label}: wrapped / bare", times, 1.1)[1]


async def unzeroed_chat_figure(
    kind: str, inner: BaseCheckpointSaver[Any], reps: int, chat: Chat, frozen: bool
) -> Any:
    """`chat_figure` again with `PRAGMA secure_delete = 0` on the saver's connection, where
    SQLite zeroes deleted content (as Debian's build does by default): what a pass's
    deletes cost without overwriting each freed page. None elsewhere. The library never
    changes the setting: it is the app's (deleted conversations stay readable in free
    pages)."""
    if kind != "sqlite":
        return None
    conn = inner.conn  # type: ignore[attr-defined]
    setting = (await (await conn.execute("PRAGMA secure_delete")).fetchone())[0]
    if not setting:
        return None
    await conn.execute("PRAGMA secure_delete = 0")
    try:
        return await chat_figure(kind, inner, reps, chat, ", secure_delete=0", frozen)
    finally:
        await conn.execute(f"PRAGMA secure_delete = {int(setting)}")
