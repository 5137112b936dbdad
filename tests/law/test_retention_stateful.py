"""The law under `retention=` (issue #21): random chats on a thread whose every run is
admitted through `RetainingSaver(inner, retention=...)`, beside a twin thread on the bare
saver that never had a pass.

Each example draws one policy (every shape `retention=` accepts, capped or not, with or
without `delta_graph` on a DeltaChannel chat) and then a random sequence of turns, turns
that interrupt, resumes, regenerates, forks and explicit-id resumes from random kept
checkpoints (each run under a random `durability`), `update_state` (as a node and as
the input) and explicit admissions. The async drivers run the pass an admission leaves
after its read answers (`_bounding`), beside the run it admitted; the sync drivers run
it before. After every step, on memory, SQLite and Postgres: every checkpoint the
thread still lists reads as its twin's, the head goes on alike, nothing dangles, no
pass failed, and (sync, uncapped, after a run) the head line holds at most the horizon, its slack
and the run just made (and, after a run admitted on a live head, that run's; runs
`update_state` writes as the input take the slack's room as admitted ones do) unless a
branch beside it is live or the run addressed a kept checkpoint by id (whose chain its
admission keeps).

Run longer with, for example::

    RETAINING_SAVER_RETENTION_EXAMPLES=1500 RETAINING_SAVER_RETENTION_STEPS=16 \\
        .venv/bin/pytest tests/law/test_retention_stateful.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import pytest
from bounding_kit import RETENTION_SHAPES, Flavor, Pairing, chat, compare, head_run_input
from bounding_kit import runs_on_head_line as head_line_runs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, StateSnapshot
from law_kit import checkpoint_id_of, run_machine
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver
from retaining_saver._rooms import slack_runs
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import thread

T = TypeVar("T")

_SCALE = int(os.environ.get("RETAINING_SAVER_RETENTION_EXAMPLES", "0") or 0)
STEPS = int(os.environ.get("RETAINING_SAVER_RETENTION_STEPS", "0") or 0) or 8
EXAMPLES = _SCALE or 16
_threads = itertools.count()
DURABILITY = st.sampled_from(["async", "async", "sync", "exit"])
"""LangGraph's `durability` for a run: `exit` saves only the run's last checkpoint (no
input checkpoint: the rules count it in the run before)."""


class Driver:
    """A graph's calls on a sync saver as they are, or on an async one through the test's
    own loop (`loop`), so that one machine drives both."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop

    def _run(self, sync: Callable[[], T], coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return sync() if self.loop is None else self.loop.run_until_complete(coro())

    def invoke(self, graph: Any, value: Any, config: RunnableConfig, durability: str) -> Any:
        return self._run(
            lambda: graph.invoke(value, config, durability=durability),
            lambda: graph.ainvoke(value, config, durability=durability),
        )

    def update(
        self, graph: Any, config: RunnableConfig, values: dict[str, Any], as_node: str | None
    ) -> Any:
        return self._run(
            lambda: graph.update_state(config, values, as_node=as_node),
            lambda: graph.aupdate_state(config, values, as_node=as_node),
        )

    def history(self, graph: Any, thread_id: str) -> list[StateSnapshot]:
        async def collect() -> list[StateSnapshot]:
            return [s async for s in graph.aget_state_history(thread(thread_id))]

        return self._run(lambda: list(graph.get_state_history(thread(thread_id))), collect)

    def admit(self, saver: RetainingSaver, thread_id: str) -> Any:
        return self._run(lambda: saver.admit(thread_id), lambda: saver.aadmit(thread_id))

    def clean(self, saver: RetainingSaver, thread_id: str) -> bool:
        found = self._run(lambda: integrity(saver, thread_id), lambda: aintegrity(saver, thread_id))
        return found.clean


class RetentionMachine(RuleBasedStateMachine):
    """One thread run through a retaining saver and its twin on the bare `inner`; `inner`
    and `driver` are set per test."""

    inner: Any
    driver: Driver

    @initialize(
        shape=st.sampled_from(sorted(RETENTION_SHAPES)),
        flavor=st.sampled_from(["full", "delta"]),
        cap=st.sampled_from([None, None, 1, 2, 5]),
        with_graph=st.booleans(),
    )
    def start(self, shape: str, flavor: Flavor, cap: int | None, with_graph: bool) -> None:
        graph = chat(None, flavor) if flavor == "delta" and with_graph else None
        self.policy = dataclasses.replace(
            RETENTION_SHAPES[shape], max_delete_per_run=cap, delta_graph=graph
        )
        self.saver = RetainingSaver(self.inner, retention=self.policy)
        self.graphs = {"kept": chat(self.saver, flavor), "twin": chat(self.inner, flavor)}
        n = next(_threads)
        self.ids = {"kept": f"kept-{n}", "twin": f"twin-{n}"}
        self.delta_without_graph = flavor == "delta" and graph is None
        self.pairing = Pairing()
        self.turns = 0
        self.kept: list[StateSnapshot] = []

    # Writing both threads alike

    def _both(
        self,
        call: Callable[[str, str | None], tuple[Any, RunnableConfig]],
        durability: str = "async",
    ) -> None:
        """Run `call(side, pin)` on both sides with LangGraph's `durability` (`pin`: the
        side's id of a kept checkpoint the call targets, paired from `self.target`), then
        hold the law."""
        pins = {"kept": self.target, "twin": None}
        if self.target is not None:
            pins["twin"] = self.pairing.twin_of[self.target]
        for side in ("kept", "twin"):
            value, config = call(side, pins[side])
            if isinstance(value, Update):
                self.driver.update(self.graphs[side], config, value.values, value.as_node)
            else:
                self.driver.invoke(self.graphs[side], value, config, durability)
        # The run's admission kept the run it found live (an interrupted or unfinished
        # head), and the chain of the checkpoint it addressed by id, if any.
        self.found_live = bool(self.kept and self.kept[0].next)
        self.pinned, self.target = self.target is not None, None
        self.ran = not isinstance(value, Update)  # an update admits nothing: no pass
        self._hold_the_law()

    target: str | None = None
    found_live = pinned = ran = False

    def _thread(self, side: str, pin: str | None = None) -> RunnableConfig:
        return thread(self.ids[side], pin)

    # Operations

    @rule(ask=st.booleans(), durability=DURABILITY)
    def user_turn(self, ask: bool, durability: str) -> None:
        self.turns += 1
        said = {"said": [f"u{self.turns}"], "ask": ask}
        self._both(lambda side, _: (said, self._thread(side)), durability)

    @rule(durability=DURABILITY)
    def resume_the_head(self, durability: str) -> None:
        if not (self.kept and self.kept[0].interrupts):
            return
        self.turns += 1
        answer = Command(resume=f"ok{self.turns}")
        self._both(lambda side, _: (answer, self._thread(side)), durability)

    @rule()
    def regenerate(self) -> None:
        # Under a horizon of 0 runs the head's own input checkpoint may be gone.
        if not self.kept or not head_line_runs(self.kept):
            return
        self.target = head_run_input(self.kept)
        self._both(lambda side, pin: (None, self._thread(side, pin)))

    @rule(pick=st.integers(0, 10_000), durability=DURABILITY)
    def from_a_kept_checkpoint(self, pick: int, durability: str) -> None:
        """Resume an interrupted checkpoint by id, run one with work left again, or branch
        a new turn from one that has none: on both sides, from paired checkpoints."""
        if not self.kept:
            return
        snapshot = self.kept[pick % len(self.kept)]
        self.target = checkpoint_id_of(snapshot.config)
        self.turns += 1
        value: Any = {"said": [f"b{self.turns}"]}
        if snapshot.interrupts:
            value = Command(resume=f"pinned{self.turns}")
        elif snapshot.next:
            value = None
        self._both(lambda side, pin: (value, self._thread(side, pin)), durability)

    @rule()
    def update_the_head(self) -> None:
        if not self.kept:
            return
        self._both(lambda side, _: (Update({"said": ["edited"]}), self._thread(side)))

    @rule()
    def input_by_update(self) -> None:
        """A run's input written by `update_state(as_node="__input__")`: the head is then an
        input checkpoint alone in its run, which a horizon's plan makes a root (a pass an
        async admission read leaves defers that: `sparing`)."""
        self.turns += 1
        said = Update({"said": [f"i{self.turns}"]}, "__input__")
        self._both(lambda side, _: (said, self._thread(side)))

    @rule()
    def admit(self) -> None:
        self.driver.admit(self.saver, self.ids["kept"])
        self._hold_the_law()

    # The law

    def _hold_the_law(self) -> None:
        self.kept = self.driver.history(self.graphs["kept"], self.ids["kept"])
        twin = self.driver.history(self.graphs["twin"], self.ids["twin"])
        assert compare(self.pairing, self.kept, twin) == []
        assert self.driver.clean(self.saver, self.ids["kept"])
        assert self.saver.counters.history_failed == 0
        bound = self.policy.history_keep_runs
        bounded = self.policy.max_delete_per_run is None and not self.delta_without_graph
        held = self.ran and not self.pinned
        if self.driver.loop is None and bounded and bound is not None and held:
            # An admission keeps the run it finds live, and the next one does not: one more
            # run on the head line until then.
            live = 1 if self.found_live else 0
            if not self._live_branch():
                assert head_line_runs(self.kept) <= bound + slack_runs(bound) + 1 + live

    def _live_branch(self) -> bool:
        """Whether a leaf other than the head has work left (an interrupt a client may still
        resume by id): the rules keep its run, and so what the head line shares with it."""
        parents = {checkpoint_id_of(s.parent_config) for s in self.kept}
        return any(s.next for s in self.kept[1:] if checkpoint_id_of(s.config) not in parents)


@dataclasses.dataclass(frozen=True)
class Update:
    """What `_both` takes for a value to mean `update_state` rather than a run."""

    values: dict[str, Any]
    as_node: str | None = None


def _check(inner: Any, driver: Driver, examples: int) -> None:
    machine = type("Bound", (RetentionMachine,), {"inner": inner, "driver": driver})
    run_machine(machine, examples, STEPS)


@pytest.mark.parametrize("kind", KINDS)
def test_retention_law_sync(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        if kind == "postgres":
            RetainingSaver(inner).create_retention_indexes()
        _check(inner, Driver(), EXAMPLES)


@pytest.fixture
def async_inner(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Driver]]:
    """The async saver of the test's `kind`, opened on an event loop the test drives."""
    kind = request.node.callspec.params["kind"]
    loop, stack = asyncio.new_event_loop(), AsyncExitStack()

    async def enter() -> Any:
        inner = await stack.enter_async_context(open_async(kind, request))
        if kind == "postgres":
            await RetainingSaver(inner).acreate_retention_indexes()
        return inner

    try:
        yield loop.run_until_complete(enter()), Driver(loop)
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()


@pytest.mark.parametrize("kind", KINDS)
def test_retention_law_async(kind: str, async_inner: tuple[Any, Driver]) -> None:
    _check(*async_inner, EXAMPLES)
