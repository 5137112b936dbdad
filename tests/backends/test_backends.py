"""Every backend primitive on real storage: memory, SQLite, Postgres (sync, async, pipeline).

Each test writes a small chain through the saver's own API (`put`/`put_writes`,
versions from `get_next_version`) and ends it with a duration leaf: a clone of
the head with only run-history metadata. The backend must read back exactly
what was written, delete and re-parent rows in one transaction, and leave
nothing half done when an operation fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
    copy_checkpoint,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6
from savers import open_async, open_sync

from retaining_saver import RetainingSaver
from retaining_saver._effects import arun, run
from retaining_saver._rules import (
    Plan,
    Reason,
    RetentionPolicy,
    leaf_deletion,
    plan_retention,
)
from retaining_saver.backends import backend_for
from retaining_saver.backends._base import Backend, Op
from retaining_saver.backends._sql import SqlBackend
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, thread_config

STORES = (
    "memory",
    "sqlite-sync",
    "sqlite-async",
    "postgres-sync",
    "postgres-async",
    "postgres-pipeline",
)
SQL_STORES = STORES[1:]
ASYNC_STORES = ("sqlite-async", "postgres-async")
# (checkpoints, writes, blobs) table of each backend kind.
TABLES = {
    "memory": ("storage", "writes", "blobs"),
    "sqlite": ("checkpoints", "writes", None),
    "postgres": ("checkpoints", "checkpoint_writes", "checkpoint_blobs"),
}
THREAD = "thread-1"


@dataclass
class Store:
    """A real saver, its backend, and calls that go the saver's native way (sync or async)."""

    name: str
    saver: BaseCheckpointSaver[Any]
    backend: Backend
    is_async: bool

    async def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: dict[str, Any],
        new_versions: dict[str, Any],
    ) -> RunnableConfig:
        if self.is_async:
            return await self.saver.aput(config, checkpoint, metadata, new_versions)  # type: ignore[arg-type]
        return self.saver.put(config, checkpoint, metadata, new_versions)  # type: ignore[arg-type]

    async def put_writes(self, config: RunnableConfig, writes: list[Any], task_id: str) -> None:
        if self.is_async:
            await self.saver.aput_writes(config, writes, task_id)
        else:
            self.saver.put_writes(config, writes, task_id)

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self.is_async:
            return await self.saver.aget_tuple(config)
        return self.saver.get_tuple(config)

    async def run(self, op: Op[Any]) -> Any:
        """The saver's native driver: `arun` for an async saver, `run` otherwise."""
        if self.is_async:
            return await arun(self.backend, op)
        return run(self.backend, op)

    async def run_other_way(self, op: Op[Any]) -> Any:
        """The other driver: `run` from a worker thread, or `arun` of a sync saver."""
        if self.is_async:
            return await asyncio.to_thread(run, self.backend, op)
        return await arun(self.backend, op)

    def table(self, role: int) -> str | None:
        return TABLES[self.backend.kind][role]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    name: str = request.param
    kind, _, mode = name.partition("-")
    if mode == "pipeline":
        with _pipelined_postgres(request) as saver:
            yield _store(name, saver, is_async=False)
    elif mode == "async":
        async with open_async(kind, request) as saver:
            yield _store(name, saver, is_async=True)
    else:
        with open_sync(kind, request) as saver:
            yield _store(name, saver, is_async=False)


@contextmanager
def _pipelined_postgres(request: pytest.FixtureRequest) -> Iterator[BaseCheckpointSaver[Any]]:
    """A `PostgresSaver` in pipeline mode, on a database a plain saver set up."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with open_sync("postgres", request):
        pass  # runs the migrations, which pipeline mode cannot
    dsn = str(request.getfixturevalue("pg_dsn"))
    with PostgresSaver.from_conn_string(dsn, pipeline=True) as saver:
        yield saver


def _store(name: str, saver: BaseCheckpointSaver[Any], *, is_async: bool) -> Store:
    backend = backend_for(saver)
    assert backend is not None
    return Store(name, saver, backend, is_async)


@dataclass
class Chain:
    """What `write_chain` wrote: the loop checkpoints in order, then the duration leaf."""

    configs: list[RunnableConfig] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [c["id"] for c in self.checkpoints]

    def version(self, index: int, channel: str) -> Any:
        return self.checkpoints[index]["channel_versions"][channel]


def _next_checkpoint(previous: Checkpoint, seq: int) -> Checkpoint:
    checkpoint = copy_checkpoint(previous)
    checkpoint["id"] = str(uuid6(clock_seq=seq))
    checkpoint["ts"] = datetime.now(UTC).isoformat()
    return checkpoint


def _root(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


async def write_chain(store: Store, thread_id: str = THREAD, steps: int = 3) -> Chain:
    """`steps` loop checkpoints (`profile` written once, `messages` every step), then a leaf.

    Checkpoint 1 owns two writes. The leaf clones the head with `new_versions={}`.
    """
    chain, config, checkpoint = Chain(), _root(thread_id), empty_checkpoint()
    for step in range(steps):
        checkpoint = _next_checkpoint(checkpoint, step)
        values: dict[str, Any] = {"messages": [f"m{i}" for i in range(step + 1)]}
        if step == 0:
            values["profile"] = {"name": "ada"}
        new_versions = {}
        for channel, value in values.items():
            current = checkpoint["channel_versions"].get(channel)
            new_versions[channel] = store.saver.get_next_version(current, None)
            checkpoint["channel_values"][channel] = value
        checkpoint["channel_versions"].update(new_versions)
        checkpoint["versions_seen"]["agent"] = dict(new_versions)
        metadata = {"source": "loop", "step": step, "parents": {}}
        config = await store.put(config, checkpoint, metadata, new_versions)
        chain.configs.append(config)
        chain.checkpoints.append(checkpoint)
        chain.metadata.append(metadata)
    await store.put_writes(chain.configs[1], [("messages", ["w0"]), ("profile", {"w": 1})], "t1")
    leaf = _next_checkpoint(checkpoint, steps)
    metadata = {
        "source": "update",
        "step": steps,
        "run_durations": {"run-1": 1.25},
        "writes": {"runtime_run_duration": {}},
    }
    chain.configs.append(await store.put(config, leaf, metadata, {}))
    chain.checkpoints.append(leaf)
    chain.metadata.append(metadata)
    return chain


def delete_all(backend: Backend, ids: list[str], fail: bool = False) -> Op[None]:
    """Delete `ids` of THREAD's root namespace, then raise if `fail`."""
    for checkpoint_id in ids:
        yield from backend.delete_checkpoint(THREAD, "", checkpoint_id)
    if fail:
        raise RuntimeError("boom after deleting")


# Reading


async def test_backend_matches_saver(store: Store) -> None:
    assert store.backend.kind == store.name.partition("-")[0]
    assert store.backend.stores_blobs == (store.table(2) is not None)


async def test_load_lineage_reads_what_was_written(store: Store) -> None:
    chain = await write_chain(store)
    lineage = await store.run(store.backend.load_lineage(THREAD))
    assert lineage.thread_id == THREAD
    assert set(lineage.nodes) == {("", i) for i in chain.ids}
    parents = [None, *chain.ids[:-1]]
    for checkpoint, metadata, parent in zip(
        chain.checkpoints, chain.metadata, parents, strict=True
    ):
        node = lineage.nodes[("", checkpoint["id"])]
        assert node.parent_id == parent
        assert dict(node.channel_versions) == checkpoint["channel_versions"]
        assert dict(node.versions_seen) == checkpoint["versions_seen"]
        assert node.ts == checkpoint["ts"]
        assert node.metadata["source"] == metadata["source"]
        assert node.metadata["step"] == metadata["step"]
    assert [lineage.nodes[("", i)].write_count for i in chain.ids] == [0, 2, 0, 0]
    leaf = lineage.nodes[("", chain.ids[-1])]
    assert leaf.metadata["run_durations"] == {"run-1": 1.25}
    # PostgresSaver drops metadata["writes"] on save; the others keep it.
    assert ("writes" in leaf.metadata) == (store.backend.kind != "postgres")


@pytest.mark.parametrize("newest", [1, 2, 3, 4, 5])
async def test_a_windowed_load_reads_the_newest_root_checkpoints_and_above(
    store: Store, newest: int
) -> None:
    """`load_lineage(newest=k)` reads what `Lineage.windowed(k)` keeps of the whole load:
    every namespace's rows at or above the k-th newest root checkpoint, with their write
    counts, and the window's start; the whole thread when it has no more than k."""
    chain = await write_chain(store)
    sub = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "sub"}}
    sub_config = await store.put(sub, _next_checkpoint(chain.checkpoints[2], 9), {}, {})
    await store.put_writes(sub_config, [("messages", ["s0"])], "t2")
    whole = await store.run(store.backend.load_lineage(THREAD))
    window = await store.run(store.backend.load_lineage(THREAD, newest))
    expected = whole.windowed(newest)
    assert window.window_start == expected.window_start
    assert window.nodes == expected.nodes
    assert (window.window_start is None) == (newest >= len(chain.ids))


async def test_load_nodes_returns_only_existing(store: Store) -> None:
    chain = await write_chain(store)
    lineage = await store.run(store.backend.load_lineage(THREAD))
    wanted = [chain.ids[1], chain.ids[3], "no-such-id"]
    found = await store.run(store.backend.load_nodes(THREAD, "", wanted))
    assert found == {i: lineage.nodes[("", i)] for i in wanted[:2]}
    assert await store.run(store.backend.load_nodes(THREAD, "other-ns", wanted)) == {}
    assert await store.run(store.backend.load_nodes(THREAD, "", [])) == {}


async def test_has_children_and_newest_id(store: Store) -> None:
    chain = await write_chain(store)
    backend = store.backend
    assert await store.run(backend.has_children(THREAD, "", chain.ids[2]))
    assert not await store.run(backend.has_children(THREAD, "", chain.ids[3]))
    assert not await store.run(backend.has_children(THREAD, "other-ns", chain.ids[2]))
    assert await store.run(backend.newest_id(THREAD, "")) == chain.ids[3]
    assert await store.run(backend.newest_id(THREAD, "other-ns")) is None
    assert await store.run(backend.newest_id("no-such-thread", "")) is None


# Writing


async def test_delete_checkpoint_removes_row_and_writes(store: Store) -> None:
    chain = await write_chain(store)
    backend = store.backend
    assert await store.run(backend.delete_checkpoint(THREAD, "", chain.ids[1])) is True
    assert await store.run(backend.delete_checkpoint(THREAD, "", chain.ids[1])) is False
    lineage = await store.run(backend.load_lineage(THREAD))
    assert ("", chain.ids[1]) not in lineage.nodes
    assert len(lineage.nodes) == 3
    assert await store.get_tuple(chain.configs[1]) is None
    stats = await store.run(backend.stats(THREAD))
    assert stats.tables[str(store.table(1))].rows == 0
    integrity = await store.run(backend.integrity(THREAD))
    assert (integrity.dangling_parents, integrity.orphan_writes) == (1, 0)


async def test_set_parents_points_child_at_new_parent(store: Store) -> None:
    chain = await write_chain(store)
    change = ("", chain.ids[2], chain.ids[1], chain.ids[0])
    assert await store.run(store.backend.set_parents(THREAD, [change])) == 1
    found = await store.run(store.backend.load_nodes(THREAD, "", [chain.ids[2]]))
    assert found[chain.ids[2]].parent_id == chain.ids[0]
    loaded = await store.get_tuple(chain.configs[2])
    assert loaded is not None and loaded.parent_config is not None
    assert loaded.parent_config["configurable"]["checkpoint_id"] == chain.ids[0]
    assert loaded.checkpoint["channel_values"] == chain.checkpoints[2]["channel_values"]


async def test_delete_unreferenced_blobs_keeps_shared_ones(store: Store) -> None:
    chain = await write_chain(store)
    backend = store.backend
    await store.run(delete_all(backend, [chain.ids[3], chain.ids[2]]))
    before = await store.run(backend.stats(THREAD))
    unshared = ("", "messages", chain.version(2, "messages"))
    shared = ("", "profile", chain.version(0, "profile"))  # every survivor still names it
    freed = await store.run(backend.delete_unreferenced_blobs(THREAD, [unshared, shared]))
    after = await store.run(backend.stats(THREAD))
    if not backend.stores_blobs:
        assert freed == []
        assert after == before
        return
    assert freed == [unshared]
    blobs = str(store.table(2))
    assert after.tables[blobs].rows == before.tables[blobs].rows - 1
    assert after.tables[blobs].bytes < before.tables[blobs].bytes
    again = await store.run(backend.delete_unreferenced_blobs(THREAD, [unshared, shared]))
    assert await store.run(backend.stats(THREAD)) == after
    if backend.kind == "postgres":
        assert again == []  # it reports rows deleted, not candidates found unreferenced
    survivor = await store.get_tuple(chain.configs[1])
    assert survivor is not None
    assert survivor.checkpoint["channel_values"] == chain.checkpoints[1]["channel_values"]
    assert (await store.run(backend.integrity(THREAD))).clean


async def test_a_window_plans_blob_sweep_reads_only_the_window(store: Store) -> None:
    """`since` (a window plan's start): the rows below it are not read, so a blob only they
    name goes. The rules never free such a blob (`_window`); this is the bound that keeps
    the sweep's work within the window."""
    chain = await write_chain(store)
    backend = store.backend
    await store.run(delete_all(backend, [chain.ids[3], chain.ids[2]]))
    first = ("", "messages", chain.version(0, "messages"))  # named by checkpoint 0 alone
    freed = await store.run(backend.delete_unreferenced_blobs(THREAD, [first], chain.ids[1]))
    assert freed == ([first] if backend.stores_blobs else [])
    again = await store.run(backend.delete_unreferenced_blobs(THREAD, [first]))
    assert again == []


async def test_stats_list_tables_in_the_backends_order(store: Store) -> None:
    """Whatever order the store answers in (Postgres may run the `UNION ALL` of its
    statistics in parallel), the tables come in `Backend.tables` order."""
    await write_chain(store)
    backend = store.backend
    assert list((await store.run(backend.stats(THREAD))).tables) == list(backend.tables)
    assert list((await store.run(backend.stats(None))).tables) == list(backend.tables)
    if isinstance(backend, SqlBackend):
        rows = [{"table_name": t, "row_count": 1, "byte_count": 2} for t in backend.tables]
        assert list(backend.in_table_order(reversed(rows))) == list(backend.tables)


async def test_stats_follow_deletions(store: Store) -> None:
    chain = await write_chain(store)
    backend = store.backend
    checkpoints, writes, _ = TABLES[backend.kind]
    before = await store.run(backend.stats(THREAD))
    assert set(before.tables) == set(backend.tables)
    assert before.tables[checkpoints].rows == 4
    assert before.tables[writes].rows == 2
    assert before.bytes > 0
    await store.run(delete_all(backend, [chain.ids[3]]))
    after = await store.run(backend.stats(THREAD))
    assert after.tables[checkpoints].rows == 3
    assert after.tables[checkpoints].bytes < before.tables[checkpoints].bytes
    empty = await store.run(backend.stats("no-such-thread"))
    assert set(empty.tables) == set(backend.tables)
    assert (empty.rows, empty.bytes) == (0, 0)
    await write_chain(store, "thread-2")
    everything = await store.run(backend.stats(None))
    assert everything.thread_id is None
    assert everything.tables[checkpoints].rows == 3 + 4


async def test_thread_ids_pages_in_order(store: Store) -> None:
    for thread_id in ("c", "a", "b"):
        checkpoint = _next_checkpoint(empty_checkpoint(), 0)
        await store.put(_root(thread_id), checkpoint, {"source": "input", "step": -1}, {})
    backend = store.backend
    assert await store.run(backend.thread_ids(None, 2)) == ["a", "b"]
    assert await store.run(backend.thread_ids("b", 2)) == ["c"]
    assert await store.run(backend.thread_ids("c", 2)) == []
    assert await store.run(backend.thread_ids(None, 0)) == []


# Plans


async def test_apply_plan_deletes_a_leaf_that_still_qualifies(store: Store) -> None:
    chain = await write_chain(store)
    lineage = await store.run(store.backend.load_lineage(THREAD))
    plan = plan_retention(lineage, RetentionPolicy(), datetime.now(UTC))
    leaf = lineage.nodes[("", chain.ids[3])]
    assert plan.deletions == (leaf_deletion(leaf, Reason.TRAILING_DURATION_LEAF, head=True),)
    applied = await store.run(store.backend.apply_plan(THREAD, plan))
    assert applied.deleted == list(plan.deletions)
    assert applied.dropped == []
    assert applied.freed_blobs == []  # the leaf shared every blob with its parent
    after = await store.run(store.backend.load_lineage(THREAD))
    assert set(after.nodes) == {("", i) for i in chain.ids[:3]}
    assert (await store.run(store.backend.integrity(THREAD))).clean


async def test_apply_plan_drops_a_deletion_whose_precondition_changed(store: Store) -> None:
    chain = await write_chain(store)
    lineage = await store.run(store.backend.load_lineage(THREAD))
    deletion = leaf_deletion(
        lineage.nodes[("", chain.ids[3])], Reason.TRAILING_DURATION_LEAF, head=True
    )
    plan = Plan(deletions=(deletion,))
    # After planning, a run starts from the leaf: it has a child and is no longer the head.
    child = _next_checkpoint(chain.checkpoints[3], 9)
    await store.put(chain.configs[3], child, {"source": "input", "step": 4}, {})
    applied = await store.run(store.backend.apply_plan(THREAD, plan))
    assert applied.deleted == []
    assert applied.dropped == [deletion]
    after = await store.run(store.backend.load_lineage(THREAD))
    assert ("", chain.ids[3]) in after.nodes
    assert len(after.nodes) == 5


async def test_delete_rows_deletes_only_what_still_holds(store: Store) -> None:
    """`delete_rows`, children before parents: each row only with the parent it was proven
    to have, no child outside the rows, and no writes unless they were consumed; the
    count is what the caller compares with the rows proven (short: the plan rolls back)."""
    chain = await write_chain(store)
    backend = store.backend
    ids = chain.ids
    _, writes, _ = TABLES[backend.kind]
    assert await store.run(backend.delete_rows(THREAD, [("", ids[3], ids[0], False)])) == 0
    assert await store.run(backend.delete_rows(THREAD, [("", ids[2], ids[1], False)])) == 0
    line = [("", ids[3], ids[2], False), ("", ids[2], ids[1], False)]
    owner = ("", ids[1], ids[0], False)  # owns two writes, not consumed
    assert await store.run(backend.delete_rows(THREAD, [*line, owner])) == 2
    lineage = await store.run(backend.load_lineage(THREAD))
    assert set(lineage.nodes) == {("", ids[0]), ("", ids[1])}
    assert (await store.run(backend.stats(THREAD))).tables[writes].rows == 2
    consumed = ("", ids[1], ids[0], True)
    misproven = ("", ids[0], "not-its-parent", False)
    assert await store.run(backend.delete_rows(THREAD, [consumed, misproven])) == 1
    assert (await store.run(backend.stats(THREAD))).tables[writes].rows == 0
    lineage = await store.run(backend.load_lineage(THREAD))
    assert set(lineage.nodes) == {("", ids[0])}


# Drivers


async def test_run_and_arun_agree(store: Store) -> None:
    await write_chain(store)
    await write_chain(store, "thread-2")
    backend = store.backend
    for make in (
        lambda: backend.load_lineage(THREAD),
        lambda: backend.stats(THREAD),
        lambda: backend.stats(None),
        lambda: backend.thread_ids(None, 10),
        lambda: backend.integrity(THREAD),
    ):
        assert await store.run(make()) == await store.run_other_way(make())


@pytest.mark.parametrize("store", SQL_STORES, indirect=True)
@pytest.mark.parametrize("native", [True, False], ids=["native", "other-driver"])
async def test_failed_op_rolls_back_every_deletion(store: Store, native: bool) -> None:
    chain = await write_chain(store)
    backend = store.backend
    run = store.run if native else store.run_other_way
    before = await store.run(backend.stats(THREAD))
    with pytest.raises(RuntimeError, match="boom"):
        await run(delete_all(backend, [chain.ids[3], chain.ids[1]], fail=True))
    lineage = await store.run(backend.load_lineage(THREAD))
    assert set(lineage.nodes) == {("", i) for i in chain.ids}
    assert await store.run(backend.stats(THREAD)) == before
    # The connection is usable again, and not left inside a transaction.
    await run(delete_all(backend, [chain.ids[3]]))
    assert await store.get_tuple(chain.configs[3]) is None


@pytest.mark.parametrize("store", ASYNC_STORES, indirect=True)
async def test_sync_run_on_the_loop_thread_is_refused(store: Store) -> None:
    await write_chain(store)
    with pytest.raises(asyncio.InvalidStateError, match="thread"):
        run(store.backend, store.backend.load_lineage(THREAD))
    lineage = await asyncio.to_thread(run, store.backend, store.backend.load_lineage(THREAD))
    assert len(lineage.nodes) == 4


# SQLite compaction


async def _compact(store: Store, ratio: float) -> Any:
    compact: Any = store.backend.compact  # type: ignore[attr-defined]
    acompact: Any = store.backend.acompact  # type: ignore[attr-defined]
    if store.is_async:
        result: Coroutine[Any, Any, Any] = acompact(ratio)
        return await result
    return compact(ratio)


@pytest.mark.parametrize("store", ["sqlite-sync", "sqlite-async"], indirect=True)
async def test_sqlite_compaction_returns_free_pages(store: Store) -> None:
    config, checkpoint, ids = _root(THREAD), empty_checkpoint(), []
    for step in range(40):
        checkpoint = _next_checkpoint(checkpoint, step)
        checkpoint["channel_values"]["messages"] = [f"{step:04}" * 5000]
        config = await store.put(config, checkpoint, {"source": "loop", "step": step}, {})
        ids.append(checkpoint["id"])
    idle = await _compact(store, 0.25)
    assert not idle.ran
    assert idle.file_bytes_after == idle.file_bytes_before
    await store.run(delete_all(store.backend, ids[:-1]))
    done = await _compact(store, 0.25)
    assert done.ran
    assert done.free_pages_before > 0 and done.free_pages_after == 0
    assert done.pages_after < done.pages_before
    assert done.file_bytes_after < done.file_bytes_before
    assert not (await _compact(store, 0.25)).ran
    assert await store.get_tuple(config) is not None
    with pytest.raises(ValueError, match="min_free_ratio"):
        await _compact(store, 1.5)


@pytest.mark.parametrize("store", ["sqlite-async"], indirect=True)
async def test_sqlite_sync_compact_goes_through_the_loop(store: Store) -> None:
    await write_chain(store)
    result = await asyncio.to_thread(store.backend.compact, 1.0)  # type: ignore[attr-defined]
    assert not result.ran
    with pytest.raises(asyncio.InvalidStateError):
        store.backend.compact(1.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("journal", "level", "relaxed"),
    [("wal", 2, True), ("wal", 3, True), ("wal", 0, False), ("delete", 2, False)],
)
def test_sqlite_reclaim_commits_without_fsync_only_in_wal(
    journal: str, level: int, relaxed: bool, request: pytest.FixtureRequest
) -> None:
    """`synchronous` drops to NORMAL for our transaction alone, in WAL mode alone."""
    with open_sync("sqlite", request) as inner:
        conn = inner.conn  # type: ignore[attr-defined]
        inner.setup()  # type: ignore[attr-defined]
        conn.execute(f"PRAGMA journal_mode={journal}")
        conn.execute(f"PRAGMA synchronous={level}")
        build_chat_graph(inner).invoke(chat_turn(0), thread_config("sync"))
        write_duration_leaf(inner, "sync")
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        assert len(RetainingSaver(inner).admit("sync").reclaimed) == 1
        conn.set_trace_callback(None)
        changes = [s for s in seen if s.startswith("PRAGMA synchronous =")]
        pair = ["PRAGMA synchronous = 1", f"PRAGMA synchronous = {level}"]
        if relaxed:  # relaxed and restored around each of our transactions
            assert changes and changes == pair * (len(changes) // 2)
        else:
            assert changes == []
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == level
