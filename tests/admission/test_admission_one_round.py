"""Postgres's admission read takes the trailing leaf in the statement that reads the head.

The store judges the head by the rules' own marker (`MarkerShape`, bound as
data); tests/admission/test_reclaim_guard.py holds that judgement to `leaf_verdict`.
These tests show where the one-round read runs at all, that a head it does
not take leaves the run exactly where the bare read would (with the reason a
two-round admission names), that a run after a stamp from anywhere costs one
statement, that concurrent admissions delete a leaf once, and that reclaim
records are bounded. Also: the stamps this process wrote (`OwnStamps`), which
a write on a stamp consults.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from savers import open_async, open_sync
from spies import Recorder

from retaining_saver import RetainingSaver, Skip
from retaining_saver._rules import DURATION_MARKER, RetentionPolicy
from retaining_saver._stamps import OwnStamps
from retaining_saver.backends import _postgres_admission as postgres_admission
from retaining_saver.testing import RUNTIME_KEY, awrite_duration_leaf, write_duration_leaf
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, run_read, thread_config


def _at(thread_id: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {**thread_config(thread_id)["configurable"], "checkpoint_id": checkpoint_id}
    }


class _Cache:
    """A history cache that records what it was told to forget."""

    def __init__(self) -> None:
        self.forgotten: list[str] = []

    def invalidate(self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]) -> None:
        self.forgotten += checkpoint_ids

    async def ainvalidate(self, *args: Any) -> None:
        self.invalidate(*args)

    def purge(self, thread_id: str | None) -> None: ...

    async def apurge(self, thread_id: str | None) -> None: ...


# Where the read takes as it reads


def test_one_round_runs_where_the_store_can_judge_the_leaf_and_nothing_waits_on_it(
    request: pytest.FixtureRequest,
) -> None:
    assert RetainingSaver(InMemorySaver())._one_round is None
    with open_sync("sqlite", request) as sqlite_saver:
        assert RetainingSaver(sqlite_saver)._one_round is None
    with open_sync("postgres", request) as inner:
        assert RetainingSaver(inner)._one_round == DURATION_MARKER
        assert RetainingSaver(inner, admission="explicit")._one_round is None
        # An app's own predicate is Python the store cannot run.
        assert RetainingSaver(inner, is_reclaimable_leaf=lambda n: True)._one_round is None
        # A cache forgets a leaf before it goes; the leaf is known only once read.
        assert RetainingSaver(inner, history_caches=[_Cache()])._one_round is None


@pytest.mark.parametrize("why", ["cache", "predicate"])
def test_without_one_round_the_leaf_is_read_then_taken(
    why: str, request: pytest.FixtureRequest
) -> None:
    with open_sync("postgres", request) as inner:
        cache = _Cache()
        if why == "cache":
            saver = RetainingSaver(inner, history_caches=[cache])
        else:
            saver = RetainingSaver(
                inner, is_reclaimable_leaf=lambda n: "run_durations" in n.metadata
            )
        build_chat_graph(inner).invoke(chat_turn(0), thread_config("two"))
        leaf = write_duration_leaf(inner, "two")
        ways = Recorder(saver._backend, ["admit_and_read", "reclaim_leaf"])
        answer = saver.get_tuple(run_read("two"))
        assert (ways.count("admit_and_read"), ways.count("reclaim_leaf")) == (0, 1)
        assert answer is not None and answer.checkpoint["id"] != leaf
        assert saver.counters.reclaimed == 1
        if why == "cache":
            assert cache.forgotten == [leaf, leaf]  # before the take, and after it


# A head it does not take


def _stale_by_a_write(inner: Any, leaf: dict[str, Any]) -> None:
    inner.put_writes({"configurable": leaf}, [("said", "late")], "late-task")


def _stale_by_another_run(inner: Any, leaf: dict[str, Any]) -> None:
    build_chat_graph(inner).invoke(chat_turn(1), thread_config("h"))


def _protected(inner: Any, leaf: dict[str, Any]) -> None:
    pass  # the saver below protects the leaf's id


def _unmarked_rewrite(inner: Any, leaf: dict[str, Any]) -> None:
    stored = inner.get_tuple({"configurable": leaf})
    inner.put(stored.parent_config, stored.checkpoint, {"source": "loop", "step": 9}, {})


def _not_a_clone(inner: Any, leaf: dict[str, Any]) -> None:
    stored = inner.get_tuple({"configurable": leaf})
    checkpoint = dict(stored.checkpoint)
    versions = dict(checkpoint["channel_versions"])
    versions["turns"] = inner.get_next_version(versions.get("turns"), None)
    checkpoint["channel_versions"] = versions
    inner.put(stored.parent_config, checkpoint, stored.metadata, {})


# How the head differs from a reclaimable leaf, and the reason admission names.
NOT_TAKEN = {
    "write": (_stale_by_a_write, Skip.OWNS_WRITES),
    "another-run": (_stale_by_another_run, Skip.NOT_A_DURATION_LEAF),
    "unmarked-rewrite": (_unmarked_rewrite, Skip.NOT_A_DURATION_LEAF),
    "protected": (_protected, Skip.PROTECTED_ID),
    "not-a-clone": (_not_a_clone, Skip.PARENT_STATE_DIFFERS),
}


@pytest.mark.parametrize("case", sorted(NOT_TAKEN))
def test_a_head_not_taken_leaves_the_run_where_the_bare_read_would(
    case: str, request: pytest.FixtureRequest
) -> None:
    change, reason = NOT_TAKEN[case]
    with open_sync("postgres", request) as inner:
        build_chat_graph(inner).invoke(chat_turn(0), thread_config("h"))
        leaf_id = write_duration_leaf(inner, "h")
        assert leaf_id is not None
        protect = [leaf_id] if case == "protected" else []
        saver = RetainingSaver(inner, protect_checkpoint_ids=protect)
        leaf = {"thread_id": "h", "checkpoint_ns": "", "checkpoint_id": leaf_id}
        change(inner, leaf)
        expected = inner.get_tuple(thread_config("h"))
        assert expected is not None
        answer = saver.get_tuple(run_read("h"))
        assert answer is not None
        assert (answer.config, answer.checkpoint) == (expected.config, expected.checkpoint)
        assert answer.pending_writes == expected.pending_writes
        assert saver.counters.reclaimed == 0
        assert saver.counters.skipped == {reason.value: 1}
        assert inner.get_tuple({"configurable": leaf}) is not None


def test_a_run_pinned_by_its_checkpoint_map_keeps_the_leaf(request: pytest.FixtureRequest) -> None:
    """A run's `checkpoint_map` selectors are protected in the statement too."""
    with open_sync("postgres", request) as inner:
        saver = RetainingSaver(inner)
        build_chat_graph(inner).invoke(chat_turn(0), thread_config("m"))
        leaf_id = write_duration_leaf(inner, "m")
        assert leaf_id is not None
        config = run_read("m")
        config["configurable"]["checkpoint_map"] = {"": leaf_id}
        answer = saver.get_tuple(config)
        assert answer is not None and answer.checkpoint["id"] == leaf_id
        assert saver.counters.skipped == {Skip.PROTECTED_ID.value: 1}


# One statement a run


@pytest.mark.parametrize("stamper", ["this-saver", "another-process"])
async def test_async_runs_take_each_stamp_in_one_statement(
    stamper: str, request: pytest.FixtureRequest
) -> None:
    """Ten turns, each stamped: each admission takes the last stamp as it reads the head,
    whoever wrote it, with no read of its own first."""
    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        reads = Recorder(inner, ["aget_tuple"])
        ways = Recorder(saver._backend, ["head_row", "admit_and_read", "reclaim_leaf"])
        graph = build_chat_graph(saver)
        for turn in range(10):
            state = await graph.ainvoke(chat_turn(turn), thread_config("ten"))
            await awrite_duration_leaf(saver if stamper == "this-saver" else inner, "ten")
        assert state["turns"] == 10
        assert saver.counters.reclaimed == 9
        assert (ways.count("head_row"), ways.count("reclaim_leaf")) == (0, 0)
        assert ways.count("admit_and_read") == 10
        admission_reads = [c for _, c in reads.calls if RUNTIME_KEY in c["configurable"]]
        assert admission_reads == []
        assert (await aintegrity(inner, "ten")).clean


def test_a_pre_v4_head_after_the_take_is_read_through_the_saver(
    request: pytest.FixtureRequest,
) -> None:
    """Only the saver migrates a pre-v4 checkpoint's pending sends: the row is not built."""
    with open_sync("postgres", request) as inner:
        saver = RetainingSaver(inner)
        config: RunnableConfig = {"configurable": {"thread_id": "old", "checkpoint_ns": ""}}
        for step in range(2):
            checkpoint = {**empty_checkpoint(), "v": 1}
            config = inner.put(config, checkpoint, {"source": "loop", "step": step}, {})
        write_duration_leaf(saver, "old")
        spies = Recorder(saver._backend, ["admit_and_read"])
        reads = Recorder(inner, ["get_tuple"])
        answer = saver.get_tuple(run_read("old"))
        assert (spies.count("admit_and_read"), reads.count("get_tuple")) == (1, 1)
        assert saver.counters.reclaimed == 1
        expected = inner.get_tuple(thread_config("old"))
        assert answer is not None and expected is not None
        assert (answer.config, answer.checkpoint) == (expected.config, expected.checkpoint)
        assert answer.checkpoint["id"] == config["configurable"]["checkpoint_id"]


async def test_concurrent_admissions_delete_a_leaf_once(request: pytest.FixtureRequest) -> None:
    """Two workers on their own connections admit the same thread at once, one in one
    round and one reading first (it has a cache): one delete, no failure, and both runs
    start from the stamp's parent."""
    rounds = 30
    async with open_async("postgres", request) as first, open_async("postgres", request) as second:
        one_round = RetainingSaver(first)
        read_first = RetainingSaver(second, history_caches=[_Cache()])
        assert one_round._one_round is not None and read_first._one_round is None
        await build_chat_graph(one_round).ainvoke(chat_turn(0), thread_config("race"))
        parent = await first.aget_tuple(thread_config("race"))
        assert parent is not None
        parent_id = parent.checkpoint["id"]
        for _ in range(rounds):
            leaf_id = await awrite_duration_leaf(one_round, "race")
            assert leaf_id is not None
            reads = (saver.aget_tuple(run_read("race")) for saver in (one_round, read_first))
            answers = await asyncio.gather(*reads)
            assert [a.checkpoint["id"] if a else None for a in answers] == [parent_id] * 2
            assert await first.aget_tuple(_at("race", leaf_id)) is None
        counters = [one_round.counters, read_first.counters]
        assert sum(c.reclaimed for c in counters) == rounds
        assert sum(c.failed for c in counters) == 0
        assert (await aintegrity(first, "race")).clean


# Bound values


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(TEXT, max_size=4))
def test_ids_and_marker_keys_bind_exactly(values: list[str]) -> None:
    """Ids (and marker keys) are bound as a text-array literal: any text Postgres can
    hold comes back."""
    literal = postgres_admission.text_array(tuple(values))
    with psycopg.connect(_server(), autocommit=True) as conn:
        row = conn.execute("SELECT %s::text[] AS parsed", (literal,)).fetchone()
    assert row is not None and row[0] == values


def _server() -> str:
    from conftest import server_dsn

    return server_dsn()


def test_a_protected_id_with_quotes_is_kept(request: pytest.FixtureRequest) -> None:
    with open_sync("postgres", request) as inner:
        build_chat_graph(inner).invoke(chat_turn(0), thread_config("q"))
        leaf_id = write_duration_leaf(inner, "q")
        assert leaf_id is not None
        # Ids Postgres cannot hold name no checkpoint: they do not break the statement.
        odd = ['a"b', "c\\d", "{e,f}", "nul\x00", "lone \ud800"]
        saver = RetainingSaver(inner, protect_checkpoint_ids=[*odd, leaf_id])
        saver.get_tuple(run_read("q"))
        assert saver.counters.skipped == {Skip.PROTECTED_ID.value: 1}
        assert saver.counters.failed == 0


# Reclaim records


def test_reclaim_records_expire_as_admissions_go(request: pytest.FixtureRequest) -> None:
    """Records older than the TTL no longer resolve, and admission reads drop them: one
    in `EXPIRE_EVERY` that takes a leaf drops every expired record of its thread."""
    with open_sync("postgres", request) as inner:
        saver = RetainingSaver(inner, reclaimed_id_ttl=timedelta(hours=1))
        graph = build_chat_graph(saver)
        graph.invoke(chat_turn(0), thread_config("x"))
        old = write_duration_leaf(inner, "x")
        assert old is not None
        graph.invoke(chat_turn(1), thread_config("x"))
        with inner._cursor() as cur:
            cur.execute(
                "UPDATE retaining_saver_reclaimed SET reclaimed_at = now() - interval '2 hours'"
            )
        fresh = RetainingSaver(inner, reclaimed_id_ttl=timedelta(hours=1))
        assert fresh.get_tuple(_at("x", old)) is None, "an expired record resolves nothing"
        for turn in range(2, 2 + postgres_admission.EXPIRE_EVERY):
            write_duration_leaf(inner, "x")
            graph.invoke(chat_turn(turn), thread_config("x"))
        with inner._cursor() as cur:
            cur.execute("SELECT checkpoint_id FROM retaining_saver_reclaimed")
            kept = {row["checkpoint_id"] for row in cur.fetchall()}
        assert old not in kept
        assert len(kept) == postgres_admission.EXPIRE_EVERY
        assert integrity(inner, "x").clean


# The stamps this process wrote, for writes on them


STAMP = {"source": "update", "step": 3, "run_durations": {"run": 1.0}, "parents": {}}
LOOP = {"source": "loop", "step": 4, "parents": {}}


def _put(
    stamps: OwnStamps, thread_id: str, metadata: dict[str, Any], ns: str = "", parent: str = "p"
) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = {"said": "00002"}
    checkpoint["versions_seen"] = {"reply": {"said": "00001"}}
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent},
        "metadata": {"user": "ada"},
    }
    stamps.remember(config, checkpoint, metadata)
    return checkpoint["id"]


def test_a_stamp_is_remembered_as_the_saver_will_store_it() -> None:
    stamps = OwnStamps(RetentionPolicy())
    leaf_id = _put(stamps, "t", {**STAMP, "writes": {"x": 1}})
    leaf = stamps.peek("t")
    assert leaf is not None
    assert (leaf.checkpoint_id, leaf.parent_id, leaf.checkpoint_ns) == (leaf_id, "p", "")
    assert leaf.channel_versions == {"said": "00002"}
    assert leaf.versions_seen == {"reply": {"said": "00001"}}
    assert "writes" not in leaf.metadata and leaf.metadata["user"] == "ada"
    stamps.forget("t", "another-id")
    assert stamps.peek("t") is not None
    stamps.forget("t", leaf_id)
    assert stamps.peek("t") is None


def test_a_stamp_is_forgotten_on_the_next_root_put() -> None:
    stamps = OwnStamps(RetentionPolicy())
    _put(stamps, "t", STAMP)
    _put(stamps, "t", LOOP, ns="child:1")
    assert stamps.peek("t") is not None
    _put(stamps, "t", STAMP)
    _put(stamps, "t", LOOP)
    assert stamps.peek("t") is None


def test_a_malformed_put_forgets_the_stamp() -> None:
    stamps = OwnStamps(RetentionPolicy())
    _put(stamps, "t", STAMP)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stamps.remember(config, {"id": "odd"}, STAMP)  # type: ignore[typeddict-item]
    assert stamps.peek("t") is None


def test_stamps_are_bounded() -> None:
    stamps = OwnStamps(RetentionPolicy(), size=2)
    for thread_id in "abc":
        _put(stamps, thread_id, STAMP)
    assert len(stamps) == 2
    assert stamps.peek("a") is None and stamps.peek("c") is not None


def test_a_reclaimed_stamp_is_forgotten_so_the_next_put_reads_nothing(
    request: pytest.FixtureRequest,
) -> None:
    """Once admission took the stamp, the run's first put has no stamp to look for."""
    with open_sync("postgres", request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        graph.invoke(chat_turn(0), thread_config("f"))
        write_duration_leaf(saver, "f")
        assert saver._stamps is not None and saver._stamps.peek("f") is not None
        lookups = Recorder(saver._backend, ["head_node"])
        graph.invoke(chat_turn(1), thread_config("f"))
        assert saver.counters.reclaimed == 1
        assert lookups.count("head_node") == 0
