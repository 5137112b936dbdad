"""The law under the history rules (issue #19): random sequences of turns, `update_state`,
forks from kept turns, history passes (`history_keep_runs` 0..3, `compact_steps`,
`keep_latest`, capped passes repeated) and `prune`, on a thread whose graph calls a
`checkpointer=True` subgraph, beside a twin thread that never had a pass.

After every step: each root checkpoint the thread keeps loads the twin's values and
`next`, the head goes on alike, and no parent dangles and no write or blob is orphaned.
Each fork from a kept checkpoint runs on the twin's subgraph memory: the machine forks
from random kept turns, and after every step every kept root checkpoint's fork memory
(what LangGraph's replay loads for the subgraph) reads as the twin's.

Run longer with, for example::

    RETAINING_SAVER_HISTORY_EXAMPLES=2000 RETAINING_SAVER_HISTORY_STEPS=20 \\
        .venv/bin/pytest tests/law/test_history_stateful.py
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from compaction_kit import memory_graph, one_piece, saved_lineage
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from law_kit import pair_new_ids, run_machine
from savers import open_sync

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import thread, turn

_SCALE = int(os.environ.get("RETAINING_SAVER_HISTORY_EXAMPLES", "0") or 0)
STEPS = int(os.environ.get("RETAINING_SAVER_HISTORY_STEPS", "0") or 0) or 6
EXAMPLES = _SCALE or 120
POSTGRES_EXAMPLES = max(20, _SCALE // 10)
LATER = datetime.now(UTC) + timedelta(days=1)
_threads = itertools.count()

POLICIES = st.builds(
    RetentionPolicy,
    history_keep_runs=st.sampled_from([None, 0, 1, 2, 3]),
    compact_steps=st.booleans(),
    history_min_age=st.just(timedelta(hours=1)),
    max_delete_per_run=st.sampled_from([None, None, 3, 8]),
).filter(lambda p: p.history_rules)


class HistoryMachine(RuleBasedStateMachine):
    """One kept thread and its twin on one saver; `saver` and `flavor` set per run."""

    saver: Any
    flavor: str

    def __init__(self) -> None:
        super().__init__()
        self.graph = memory_graph(self.saver, "delta" if self.flavor != "full" else "full")
        n = next(_threads)
        self.kept, self.twin = f"kept-{n}", f"twin-{n}"
        self.to_twin: dict[str, str] = {}
        self.turns = 0
        # Three turns to start with: a pass has history to delete from the first step.
        for i in range(3):
            self._both(lambda t: self.graph.invoke(turn(i), thread(t)))  # noqa: B023

    # Writing both threads alike

    def _ids(self, thread_id: str) -> list[str]:
        history = self.graph.get_state_history(thread(thread_id))
        return sorted(s.config["configurable"]["checkpoint_id"] for s in history)

    def _both(self, write: Any) -> None:
        for thread_id in (self.kept, self.twin):
            write(thread_id)
        pair_new_ids(self.to_twin, self._ids(self.kept), self._ids(self.twin))

    # Operations

    @rule()
    def user_turn(self) -> None:
        self.turns += 1
        self._both(lambda t: self.graph.invoke(turn(self.turns + 3), thread(t)))

    @rule()
    def update_head(self) -> None:
        self._both(lambda t: self.graph.update_state(thread(t), {"said": ["edited"]}))

    @rule(pick=st.integers(0, 10_000))
    def fork_from_a_kept_checkpoint(self, pick: int) -> None:
        """Regenerate from a kept checkpoint (or branch from a turn's end): both threads
        run on the same subgraph memory and end alike."""
        kept = self._ids(self.kept)
        mine = kept[pick % len(kept)]
        pins = {self.kept: mine, self.twin: self.to_twin[mine]}
        given = None if self.graph.get_state(thread(self.kept, mine)).next else turn(77)
        self._both(lambda t: self.graph.invoke(given, thread(t, pins[t])))

    @rule(policy=POLICIES, repeat=st.integers(1, 3))
    def history_pass(self, policy: RetentionPolicy, repeat: int) -> None:
        if self.flavor == "delta-with-graph":
            policy = dataclasses.replace(policy, delta_graph=self.graph)
        wrapped = RetainingSaver(self.saver, admission="off")
        for _ in range(repeat):
            before = saved_lineage(self.saver, self.kept)
            report = wrapped.enforce_thread_retention(self.kept, policy, now=LATER)
            cap = policy.max_delete_per_run
            if cap is not None and len(report.deleted) > cap:
                assert one_piece(report.deleted, before), sorted(report.deleted)
        self.fork_from_a_kept_checkpoint(0)  # the oldest kept: what the pass cut above

    @rule()
    def keep_latest(self) -> None:
        policy = RetentionPolicy(keep_latest=True, history_min_age=timedelta(hours=1))
        RetainingSaver(self.saver, admission="off").enforce_thread_retention(
            self.kept, policy, now=LATER
        )

    @rule()
    def prune(self) -> None:
        RetainingSaver(self.saver, admission="off").prune([self.kept])

    def _fork_memory(self, thread_id: str, checkpoint_id: str) -> Any:
        """The `inner` subgraph memory a fork from the root checkpoint loads, read as
        LangGraph's replay reads it: the latest before the parent of an `update`/`fork`
        checkpoint, else before the checkpoint itself."""
        at = self.graph.get_state(thread(thread_id, checkpoint_id))
        bound = checkpoint_id
        if at.metadata and at.metadata.get("source") in ("update", "fork") and at.parent_config:
            bound = at.parent_config["configurable"]["checkpoint_id"]
        inner = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "inner"}}
        before = {"configurable": {"checkpoint_id": bound}}
        # Read whole first: SqliteSaver holds its lock while `list` iterates.
        found = list(self.saver.list(inner, before=before, limit=1))
        return self.graph.get_state(found[0].config).values if found else None

    # The law

    @invariant()
    def kept_checkpoints_load_like_the_twin(self) -> None:
        for mine in self._ids(self.kept):
            a = self.graph.get_state(thread(self.kept, mine), subgraphs=True)
            b = self.graph.get_state(thread(self.twin, self.to_twin[mine]), subgraphs=True)
            assert (a.values, a.next) == (b.values, b.next), mine
            assert self._fork_memory(self.kept, mine) == self._fork_memory(
                self.twin, self.to_twin[mine]
            ), mine
        head, twin_head = (self.graph.get_state(thread(t)) for t in (self.kept, self.twin))
        assert (head.values, head.next) == (twin_head.values, twin_head.next)
        assert integrity(self.saver, self.kept).clean


FLAVORS = ["full", "delta", "delta-with-graph"]


def _check(saver: Any, flavor: str, examples: int) -> None:
    machine = type("Bound", (HistoryMachine,), {"saver": saver, "flavor": flavor})
    run_machine(machine, examples, STEPS)


@pytest.fixture
def sqlite_saver(request: pytest.FixtureRequest) -> Iterator[Any]:
    with open_sync("sqlite", request) as saver:
        yield saver


@pytest.mark.parametrize("flavor", FLAVORS)
def test_history_law_memory(flavor: str, request: pytest.FixtureRequest) -> None:
    with open_sync("memory", request) as saver:
        _check(saver, flavor, EXAMPLES // len(FLAVORS) + 1)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_history_law_sqlite(flavor: str, sqlite_saver: Any) -> None:
    _check(sqlite_saver, flavor, EXAMPLES // len(FLAVORS) + 1)


def test_history_law_postgres(request: pytest.FixtureRequest) -> None:
    with open_sync("postgres", request) as saver:
        _check(saver, "full", POSTGRES_EXAMPLES)


def horizon(runs: int | None, *, compact: bool = False, cap: int | None = None) -> RetentionPolicy:
    """The history rules with `runs` kept, nothing too young to go (the machine's
    passes run at `LATER`), compaction and a cap as given."""
    return RetentionPolicy(
        history_keep_runs=runs,
        compact_steps=compact,
        history_min_age=timedelta(hours=1),
        max_delete_per_run=cap,
    )


def test_keep_latest_keeps_what_forks_from_its_kept_checkpoints_load() -> None:
    """A sequence the machine found: keep_latest keeps an older root checkpoint (above a
    branch with pending writes); a fork from it must load the subgraph memory it loaded
    before, which keep_latest then keeps too (it removed it, as upstream's prune does)."""
    from langgraph.checkpoint.memory import InMemorySaver

    machine = type("Bound", (HistoryMachine,), {"saver": InMemorySaver(), "flavor": "delta"})()
    machine.keep_latest()
    machine.fork_from_a_kept_checkpoint(0)
    machine.history_pass(horizon(2), 1)
    machine.history_pass(horizon(0), 1)
    machine.keep_latest()
    machine.kept_checkpoints_load_like_the_twin()


def test_a_fork_of_a_kept_fork_replays_on_the_twins_subgraph_memory() -> None:
    """A sequence the long profile found: a fork from a kept `fork` checkpoint writes a
    new `fork` checkpoint whose replay loads the subgraph's latest checkpoint before the
    kept one's own id. A pass had deleted that subgraph checkpoint (it was written under
    a removed run), so replaying the new fork ran on older memory than the twin's."""
    from langgraph.checkpoint.memory import InMemorySaver

    machine = type("Bound", (HistoryMachine,), {"saver": InMemorySaver(), "flavor": "full"})()

    machine.history_pass(horizon(3), 1)
    machine.update_head()
    machine.update_head()
    machine.history_pass(horizon(0), 1)
    machine.fork_from_a_kept_checkpoint(3353)
    machine.history_pass(horizon(0, compact=True, cap=3), 3)
    machine.fork_from_a_kept_checkpoint(205)
    machine.kept_checkpoints_load_like_the_twin()
    # What a user sees: replaying the newest fork ends as on the twin.
    graph, kept = machine.graph, machine.kept
    forks = [i for i in machine._ids(kept) if _source(graph, kept, i) == "fork"]
    newest = max(forks)
    pins = {kept: newest, machine.twin: machine.to_twin[newest]}
    machine._both(lambda t: graph.invoke(None, thread(t, pins[t])))
    ends = [graph.get_state(thread(t)).values for t in (kept, machine.twin)]
    assert ends[0] == ends[1]
    machine.kept_checkpoints_load_like_the_twin()


def _source(graph: Any, thread_id: str, checkpoint_id: str) -> Any:
    return graph.get_state(thread(thread_id, checkpoint_id)).metadata.get("source")


def test_a_pass_keeps_the_subgraph_memory_a_kept_branch_continues() -> None:
    """A sequence the long profile found: after a fork, a run's subgraph checkpoint
    continues memory written under a removed run, off the subgraph's head line. The
    plan raised `KeyError` (the pass failed); that memory now stays, its parent."""
    from langgraph.checkpoint.memory import InMemorySaver

    machine = type("Bound", (HistoryMachine,), {"saver": InMemorySaver(), "flavor": "full"})()

    machine.update_head()
    machine.history_pass(horizon(0, cap=3), 3)
    machine.fork_from_a_kept_checkpoint(545)
    machine.update_head()
    machine.user_turn()
    machine.history_pass(horizon(0), 1)
    machine.kept_checkpoints_load_like_the_twin()


@pytest.mark.parametrize("flavor", ["full", "delta"])
def test_a_capped_pass_keeps_the_memory_forks_from_what_it_leaves_load(flavor: str) -> None:
    """A sequence the long profile found: a capped pass (`history_keep_runs=0`, cap 8)
    deletes an old run with its subgraph checkpoints and defers a forked branch. The
    rules judged fork memory for the uncapped plan, where that branch went too, so the
    subgraph checkpoint a fork from the branch loads went with the old run."""
    from langgraph.checkpoint.memory import InMemorySaver

    machine = type("Bound", (HistoryMachine,), {"saver": InMemorySaver(), "flavor": flavor})()

    for pick in (5532, 940):
        machine.fork_from_a_kept_checkpoint(pick)
        machine.user_turn()
    machine.history_pass(horizon(3, compact=True), 1)
    machine.user_turn()
    machine.fork_from_a_kept_checkpoint(0)
    machine.history_pass(horizon(None, compact=True), 1)
    machine.user_turn()
    machine.history_pass(horizon(3, compact=False), 1)
    machine.fork_from_a_kept_checkpoint(941)
    machine.history_pass(horizon(None, compact=True), 1)
    machine.fork_from_a_kept_checkpoint(58)
    machine.history_pass(horizon(0, compact=False, cap=8), 2)
    machine.kept_checkpoints_load_like_the_twin()
