"""The retention contract as executable scenarios, for any supported saver.

Each scenario builds a thread with real LangGraph runs and forks, deletes
through the engine (or, for the two negative controls, behind its back), and
then verifies (a) latest resume, (b) explicit `checkpoint_id` resume of every
surviving checkpoint, (c) a branch from an older turn found by a
`parent_config` walk, and (d) zero orphan rows and dangling parents.

Run them against your own saver the way `langgraph-checkpoint-conformance`
is run::

    @pytest.mark.parametrize("name", SCENARIOS)
    @pytest.mark.parametrize("flavor", FLAVORS)
    def test_contract(name, flavor):
        SCENARIOS[name](open_my_saver, flavor)

where `open_my_saver()` is a context manager yielding a fresh, empty saver.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver._effects import run
from retaining_saver._errors import UnsupportedSaverError
from retaining_saver._rules import Protection, Reason, RetentionPolicy
from retaining_saver._saver import RetainingSaver
from retaining_saver.testing.checks import LineageIntegrityError, integrity, walk
from retaining_saver.testing.graphs import Flavor, chat_graph, subgraph_chat, thread, turn
from retaining_saver.testing.leaves import write_duration_leaf

SaverFactory = Callable[[], AbstractContextManager[BaseCheckpointSaver[Any]]]
Scenario = Callable[[SaverFactory, Flavor], None]
SCENARIOS: dict[str, Scenario] = {}
T = "contract"


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


class _Thread:
    """A chat thread on a bare saver, and what every checkpoint held before deletion."""

    def __init__(self, inner: BaseCheckpointSaver[Any], flavor: Flavor) -> None:
        self.inner = inner
        self.saver = RetainingSaver(inner, admission="off")
        self.graph = chat_graph(inner, flavor)
        self.snapshot: dict[str, Any] = {}

    def turns(self, first: int, last: int, *, leaves: bool = False) -> None:
        for i in range(first, last):
            self.graph.invoke(turn(i), thread(T))
            if leaves:
                write_duration_leaf(self.inner, T, f"run-{i}")

    def head_id(self) -> str:
        head = self.inner.get_tuple(thread(T))
        assert head is not None, "thread has no head"
        return str(head.checkpoint["id"])

    def remember(self) -> None:
        self.snapshot = {
            str(s.config["configurable"]["checkpoint_id"]): s.values
            for s in self.graph.get_state_history(thread(T))
        }

    def enforce(self, **policy: Any) -> Any:
        self.remember()
        return self.saver.enforce_thread_retention(T, RetentionPolicy(**policy))

    def verify(self) -> None:
        """(b) explicit resume, (c) branch, (d) integrity, then (a) latest resume."""
        surviving = [
            str(s.config["configurable"]["checkpoint_id"])
            for s in self.graph.get_state_history(thread(T))
        ]
        for checkpoint_id in surviving:
            if checkpoint_id in self.snapshot:
                got = self.graph.get_state(thread(T, checkpoint_id)).values
                assert got == self.snapshot[checkpoint_id], f"resume of {checkpoint_id} changed"
        self._branch_from_turn(1)
        report = integrity(self.inner, T)
        assert report.clean, f"orphans or dangling parents: {report}"
        latest = self.graph.get_state(thread(T)).values
        after = self.graph.invoke(turn(500), thread(T))
        assert after["said"] == [*latest.get("said", []), "user 500", "echo user 500"]
        assert after["turns"] == latest.get("turns", 0) + 1

    def _branch_from_turn(self, k: int) -> None:
        """Branch the way regenerate does: walk back to the state before turn `k`."""
        for step in walk(self.inner, thread(T)):
            values = self.graph.get_state(step.config).values
            if f"user {k}" not in values.get("said", []):
                break
        else:
            raise AssertionError(f"no checkpoint before turn {k} on the walk")
        branched = self.graph.invoke(turn(900), step.config)
        kept = values.get("said", [])
        assert branched["said"] == [*kept, "user 900", "echo user 900"]


@scenario
def deleting_a_branch_ancestor_is_detected_loudly(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 3)
        ancestor = list(walk(inner, thread(T)))[5]
        backend = chat.saver._backend
        assert backend is not None
        ns, cid = "", str(ancestor.checkpoint["id"])
        run(backend, backend.delete_checkpoint(T, ns, cid))
        try:
            list(walk(inner, thread(T)))
        except LineageIntegrityError:
            return
        raise AssertionError("a walk over a deleted ancestor did not fail")


@scenario
def deleting_an_explicit_resume_target_removes_it(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 2)
        target = chat.head_id()
        chat.turns(2, 3)
        backend = chat.saver._backend
        assert backend is not None
        run(backend, backend.delete_checkpoint(T, "", target))
        assert inner.get_tuple(thread(T, target)) is None
        assert chat.graph.get_state(thread(T, target)).values == {}


@scenario
def pending_writes_survive_byte_identical(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 3, leaves=True)
        head = inner.get_tuple(thread(T))
        assert head is not None
        inner.put_writes(head.config, [("said", ["in flight"]), ("turns", 7)], "task-1")
        before = inner.get_tuple(head.config)
        report = chat.enforce(prune_leaf_sibling_branches=True, graft_duration_links=True)
        after = inner.get_tuple(head.config)
        assert before is not None and after is not None
        assert after.pending_writes == before.pending_writes
        assert report.kept[("", str(head.checkpoint["id"]))] in (
            Protection.HEAD,
            Protection.PENDING_WRITES,
        )


@scenario
def trailing_duration_leaf_default_policy(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 3, leaves=True)
        leaf = chat.head_id()
        report = chat.enforce()
        assert dict(report.deleted) == {("", leaf): Reason.TRAILING_DURATION_LEAF}
        assert inner.get_tuple(thread(T, leaf)) is None
        chat.verify()


@scenario
def round_trip_leaf_goes_update_state_control_stays(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 2)
        chat.graph.update_state(thread(T), {"turns": 40})
        control = chat.head_id()
        chat.turns(2, 3, leaves=True)
        leaf = chat.head_id()
        stored = inner.get_tuple(thread(T, leaf))
        assert stored is not None and stored.metadata.get("source") == "update"
        report = chat.enforce()
        assert list(report.deleted) == [("", leaf)]
        assert inner.get_tuple(thread(T, control)) is not None
        chat.verify()


@scenario
def superseded_subtree_opt_in_with_ttl(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 1)
        fork_point = chat.head_id()
        chat.turns(1, 3)
        old_line = {cid for cid in _ids(inner)} - set(_chain_ids(inner, fork_point))
        chat.graph.invoke(turn(77), thread(T, fork_point))  # regenerate
        assert not chat.enforce().deleted, "pruning superseded branches must be opt-in"
        young = chat.enforce(
            prune_leaf_sibling_branches=True, sibling_branch_min_age=timedelta(hours=1)
        )
        assert not young.deleted and all(
            young.kept[("", c)] == Protection.TOO_YOUNG for c in old_line
        )
        chat.remember()
        later = datetime.now(UTC) + timedelta(hours=2)
        report = chat.saver.enforce_thread_retention(
            T,
            RetentionPolicy(
                prune_leaf_sibling_branches=True, sibling_branch_min_age=timedelta(hours=1)
            ),
            now=later,
        )
        assert {cid for _, cid in report.deleted} == old_line
        assert set(report.deleted.values()) == {Reason.SUPERSEDED_BRANCH}
        chat.verify()


@scenario
def duration_link_protected_then_grafted(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 1, leaves=True)
        link = chat.head_id()
        chat.turns(1, 3)
        report = chat.enforce()
        assert not report.deleted and report.kept[("", link)] == Protection.DURATION_LINK
        grafted = chat.enforce(graft_duration_links=True)
        assert dict(grafted.deleted) == {("", link): Reason.GRAFTED_DURATION_LINK}
        assert len(grafted.grafts) == 1
        chat.verify()


@scenario
def persistent_subgraph_head_survives(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        graph = subgraph_chat(inner, flavor)
        for i in range(2):
            graph.invoke(turn(i), thread(T))
        write_duration_leaf(inner, T)
        saver = RetainingSaver(inner, admission="off")
        before = saver.enforce_thread_retention(T, dry_run=True)
        sub_heads = {ns: cid for ns, cid in before.heads.items() if ns}
        assert sub_heads, "the subgraph kept no namespace of its own"
        report = saver.enforce_thread_retention(T)
        assert all(ns == "" for ns, _ in report.deleted)
        for ns, cid in sub_heads.items():
            assert inner.get_tuple(
                {"configurable": {"thread_id": T, "checkpoint_ns": ns, "checkpoint_id": cid}}
            )
        assert graph.invoke(turn(9), thread(T))["turns"] == 3


@scenario
def missing_ancestor_row_is_tolerated(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 3, leaves=True)
        backend = chat.saver._backend
        assert backend is not None
        oldest = min(_ids(inner))
        child = next(
            t
            for t in inner.list(thread(T))
            if (t.parent_config or {}).get("configurable", {}).get("checkpoint_id") == oldest
        )
        run(backend, backend.delete_checkpoint(T, "", oldest))
        leaf = chat.head_id()
        report = chat.enforce(prune_leaf_sibling_branches=True, graft_duration_links=True)
        assert ("", leaf) in report.deleted
        assert ("", str(child.checkpoint["id"])) not in report.deleted
        allowed = {Reason.TRAILING_DURATION_LEAF, Reason.GRAFTED_DURATION_LINK}
        assert set(report.deleted.values()) <= allowed


@scenario
def unsupported_saver_refused_before_any_read(factory: SaverFactory, flavor: Flavor) -> None:
    class Shallow(InMemorySaver):
        reads = 0

        def get_tuple(self, config: Any) -> Any:
            Shallow.reads += 1
            return super().get_tuple(config)

        def list(self, *args: Any, **kwargs: Any) -> Any:
            Shallow.reads += 1
            return super().list(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saver = RetainingSaver(Shallow())
    try:
        saver.enforce_thread_retention(T)
    except UnsupportedSaverError as error:
        assert "Shallow" in str(error)
    else:
        raise AssertionError("an unsupported saver was not refused")
    assert Shallow.reads == 0 and saver.admit(T).reclaimed == ()


@scenario
def delete_cap_zero_and_negative(factory: SaverFactory, flavor: Flavor) -> None:
    try:
        RetentionPolicy(max_delete_per_run=-1)
    except ValueError as error:
        assert "max_delete_per_run" in str(error)
    else:
        raise AssertionError("a negative cap was accepted")
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 2, leaves=True)
        leaf = chat.head_id()
        report = chat.enforce(max_delete_per_run=0)
        assert not report.deleted and report.deferred == (("", leaf),)
        assert inner.get_tuple(thread(T, leaf)) is not None
        assert report.after == report.before


@scenario
def empty_thread_reports_equal_stats(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        report = RetainingSaver(inner).enforce_thread_retention("never-used")
        assert not report.deleted and report.before == report.after
        assert report.before.rows == 0 and set(report.before.tables)


@scenario
def shared_blobs_survive_leaf_deletion(factory: SaverFactory, flavor: Flavor) -> None:
    with factory() as inner:
        chat = _Thread(inner, flavor)
        chat.turns(0, 2, leaves=True)
        before = chat.saver.storage_stats(T)
        report = chat.enforce()
        assert len(report.deleted) == 1 and report.freed_blobs == ()
        blob_tables = [t for t in before.tables if "blob" in t]
        for table in blob_tables:
            assert report.after.tables[table] == before.tables[table]
        chat.verify()


def _ids(inner: BaseCheckpointSaver[Any]) -> set[str]:
    return {str(t.checkpoint["id"]) for t in inner.list(thread(T))}


def _chain_ids(inner: BaseCheckpointSaver[Any], checkpoint_id: str) -> list[str]:
    return [str(t.checkpoint["id"]) for t in walk(inner, thread(T, checkpoint_id))]
