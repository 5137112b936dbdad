"""SQLite lineage loads read each checkpoint's payload and metadata once (`_sqlite_lineage`).

Every load through a backend that remembers rows must give the lineage a
backend that has read nothing before gives, whatever happened to the rows in
between: new runs, rows rewritten under their id, values stored whole, parents
moved, writes added, rows deleted. And a row it remembers is not decoded again.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from sqlite_rows_kit import EVERY_RUN_KEPT, Decodes, chat

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver._rules import Lineage
from retaining_saver._transact import arun, run
from retaining_saver.backends import _sqlite_lineage
from retaining_saver.backends._base import Mode
from retaining_saver.backends._sqlite_plan import checkpoint_of
from retaining_saver.backends._upstream.tuples import sqlite_stored_metadata
from retaining_saver.backends.sqlite import SqliteBackend
from retaining_saver.testing.graphs import build_chat_graph, chat_graph, chat_turn, thread, turn


@pytest.fixture
def saver(sqlite_conn: sqlite3.Connection) -> SqliteSaver:
    saved = SqliteSaver(sqlite_conn)
    saved.setup()
    return saved


def _load(backend: SqliteBackend, thread_id: str, newest: int | None = None) -> Lineage:
    return run(backend, backend.load_lineage(thread_id, newest), Mode.READ)


def _fresh(saver: SqliteSaver, thread_id: str, newest: int | None = None) -> Lineage:
    """The lineage a backend that remembers nothing reads."""
    return _load(SqliteBackend(saver), thread_id, newest)


def _rows(saver: SqliteSaver, thread_id: str) -> list[tuple[str, str]]:
    cur = saver.conn.execute(
        "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = ?"
        " ORDER BY checkpoint_id",
        (thread_id,),
    )
    return [(ns, cid) for ns, cid in cur.fetchall()]


def test_a_second_load_decodes_no_row_and_gives_the_same_lineage(
    saver: SqliteSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = build_chat_graph(saver)
    for i in range(5):
        graph.invoke(chat_turn(i), thread("t"))
    backend = SqliteBackend(saver)
    decodes = Decodes(backend, monkeypatch)
    first = _load(backend, "t")
    assert decodes.count == len(_rows(saver, "t")) > 0
    second = _load(backend, "t")
    assert decodes.count == len(_rows(saver, "t"))  # nothing decoded the second time
    assert second == first == _fresh(saver, "t")


def test_a_new_run_decodes_only_its_own_rows(
    saver: SqliteSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = chat(saver, 4)
    backend = SqliteBackend(saver)
    decodes = Decodes(backend, monkeypatch)
    _load(backend, "t")
    before, read = len(_rows(saver, "t")), decodes.count
    graph.invoke(turn(4), thread("t"))
    assert _load(backend, "t") == _fresh(saver, "t")
    assert decodes.count - read == len(_rows(saver, "t")) - before == 4


def test_a_window_remembers_only_the_rows_it_read(saver: SqliteSaver) -> None:
    chat(saver, 6)
    backend = SqliteBackend(saver)
    window = _load(backend, "t", newest=8)
    assert window == _fresh(saver, "t", newest=8)
    assert set(backend.remembered.get("t") or {}) == set(window.nodes)
    assert _load(backend, "t") == _fresh(saver, "t")  # wider: the rest is read now


def _rewrite(saver: SqliteSaver, key: tuple[str, str], **columns: Any) -> None:
    sets = ", ".join(f"{name} = ?" for name in columns)
    saver.conn.execute(
        f"UPDATE checkpoints SET {sets} WHERE thread_id = 't' AND checkpoint_ns = ?"
        " AND checkpoint_id = ?",
        (*columns.values(), *key),
    )
    saver.conn.commit()


def _payload(saver: SqliteSaver, key: tuple[str, str]) -> dict[str, Any]:
    cur = saver.conn.execute(
        "SELECT type, checkpoint FROM checkpoints WHERE thread_id = 't' AND checkpoint_ns = ?"
        " AND checkpoint_id = ?",
        key,
    )
    type_, payload = cur.fetchone()
    return dict(checkpoint_of(saver, {"type": type_, "checkpoint": payload}))


@pytest.mark.parametrize("change", ["payload", "metadata"])
def test_a_row_rewritten_under_its_id_is_read_again(saver: SqliteSaver, change: str) -> None:
    chat(saver, 3)
    backend = SqliteBackend(saver)
    _load(backend, "t")
    key = _rows(saver, "t")[-1]
    if change == "payload":
        checkpoint = _payload(saver, key)
        checkpoint["channel_versions"] = {**checkpoint["channel_versions"], "extra": "9"}
        _rewrite(saver, key, checkpoint=saver.serde.dumps_typed(checkpoint)[1])
    else:
        _rewrite(saver, key, metadata=json.dumps({"source": "fork", "step": 99}).encode())
    loaded = _load(backend, "t")
    assert loaded == _fresh(saver, "t")
    node = loaded.nodes[key]
    assert node.channel_versions.get("extra") == "9" or node.metadata.get("step") == 99


_VALIDATED = ["checkpoint_ns", "checkpoint_id", "type", "payload_length", "metadata_length"]


@pytest.mark.parametrize("field", range(len(_VALIDATED)), ids=_VALIDATED)
def test_a_row_comes_without_payload_only_while_all_it_is_known_by_matches(
    saver: SqliteSaver, field: int
) -> None:
    chat(saver, 2)
    saver.conn.row_factory = sqlite3.Row
    sql = SqliteBackend.sql.select_lineage
    params: dict[str, Any] = {"thread_id": "t", "newest": None, "known": "[]", "written": "[]"}
    rows = saver.conn.execute(sql, params).fetchall()
    known = [[r[name] for name in _VALIDATED] for r in rows]
    changed = known[0][field]
    known[0][field] = changed + 1 if isinstance(changed, int) else f"{changed}x"
    params["known"] = json.dumps(known)
    again = {(r["checkpoint_ns"], r["checkpoint_id"]): r for r in saver.conn.execute(sql, params)}
    for i, row in enumerate(rows):
        found = again[row["checkpoint_ns"], row["checkpoint_id"]]
        if i == 0:
            assert not found["remembered"]
            assert found["checkpoint"] == row["checkpoint"]
            assert found["metadata"] == row["metadata"]
        else:
            assert found["remembered"]
            assert found["checkpoint"] is None and found["metadata"] is None


def test_parents_and_writes_are_read_from_the_row_each_time(saver: SqliteSaver) -> None:
    chat(saver, 3)
    backend = SqliteBackend(saver)
    rows = _rows(saver, "t")
    writes = _load(backend, "t").nodes[rows[1]].write_count
    _rewrite(saver, rows[-1], parent_checkpoint_id=rows[0][1])
    saver.conn.execute(
        "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel,"
        " type, value) VALUES ('t', ?, ?, 'task', 0, 'said', 'null', NULL)",
        rows[1],
    )
    saver.conn.commit()
    loaded = _load(backend, "t")
    assert loaded == _fresh(saver, "t")
    assert loaded.nodes[rows[-1]].parent_id == rows[0][1]
    assert loaded.nodes[rows[1]].write_count == writes + 1


def test_deleted_rows_are_forgotten_and_so_is_an_emptied_thread(saver: SqliteSaver) -> None:
    chat(saver, 2)
    backend = SqliteBackend(saver)
    _load(backend, "t")
    doomed = _rows(saver, "t")[0]
    saver.conn.execute(
        "DELETE FROM checkpoints WHERE thread_id = 't' AND checkpoint_ns = ? AND checkpoint_id = ?",
        doomed,
    )
    saver.conn.commit()
    assert _load(backend, "t") == _fresh(saver, "t")
    assert doomed not in (backend.remembered.get("t") or {})
    saver.delete_thread("t")
    assert _load(backend, "t") == _fresh(saver, "t")
    assert backend.remembered.get("t") is None


def test_what_is_remembered_is_bounded(saver: SqliteSaver, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = chat_graph(saver)
    for name in ("a", "b", "c"):
        graph.invoke(turn(0), thread(name))
    monkeypatch.setattr(_sqlite_lineage, "REMEMBERED_THREADS", 2)
    backend = SqliteBackend(saver)
    for name in ("a", "b", "c"):
        _load(backend, name)
    assert backend.remembered.get("a") is None  # the least recently loaded went
    remembered = backend.remembered.get("c")
    assert remembered is not None
    one_thread = _sqlite_lineage.rows_bytes(remembered)
    monkeypatch.setattr(_sqlite_lineage, "REMEMBERED_THREAD_BYTES", one_thread - 1)
    small = SqliteBackend(saver)
    assert _load(small, "c") == _fresh(saver, "c")
    assert small.remembered.get("c") is None  # too large a thread is read, not remembered


def _counted_bytes(rows: _sqlite_lineage.ThreadRows) -> int:
    return sum(r.size for r in rows.values())


def test_a_put_adds_one_row_to_what_was_written_and_its_bytes(saver: SqliteSaver) -> None:
    """What a thread's puts wrote is one map, grown in place with its bytes counted as rows
    come and go: a put costs one row however many were written before it (a map copied or
    re-counted at each put made a thread's puts cost the square of its length)."""
    graph = chat_graph(saver)
    backend = SqliteBackend(saver)
    written = None
    for i in range(3):
        graph.invoke(turn(i), thread("t"))
        for found in saver.list(thread("t"), limit=4):
            backend.stored(found.config, found.checkpoint, found.metadata)
        rows = backend.written.get("t")
        assert rows is not None and (written is None or rows is written)
        written = rows
        assert rows.bytes == _counted_bytes(rows) == backend.written.bytes
    assert written is not None
    some = sorted(written)[:3]
    backend._forget_written("t", some)
    assert not set(some) & set(written)
    assert written.bytes == _counted_bytes(written) == backend.written.bytes > 0
    assert _load(backend, "t") == _fresh(saver, "t")
    assert backend.written.get("t") is None and backend.written.bytes == 0
    remembered = backend.remembered.get("t")
    assert remembered is not None
    assert remembered.bytes == _counted_bytes(remembered) == backend.remembered.bytes


def test_a_remembered_node_is_shared_until_its_row_moves(saver: SqliteSaver) -> None:
    """A second load hands back the very nodes of the first where the row's parent and
    write count are unchanged, and a new node where one of them moved."""
    graph = chat(saver, 3)
    backend = SqliteBackend(saver)
    first = _load(backend, "t")
    head = max(first.nodes, key=lambda k: k[1])
    graph.update_state(thread("t"), None)  # the head gains a child: its parent row stays
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": head[1]}}
    saver.put_writes(config, [("said", "pending")], "task-1")
    second = _load(backend, "t")
    assert second == _fresh(saver, "t")
    for key, node in first.nodes.items():
        assert (second.nodes[key] is node) == (key != head)
    assert second.nodes[head].write_count == _node_writes(saver, head) > 0


def _node_writes(saver: SqliteSaver, key: tuple[str, str]) -> int:
    cur = saver.conn.execute(
        "SELECT count(*) FROM writes WHERE thread_id = 't' AND checkpoint_ns = ?"
        " AND checkpoint_id = ?",
        key,
    )
    return int(cur.fetchone()[0])


def test_a_value_stored_whole_is_seen_by_the_next_load(sqlite_path: str) -> None:
    """A history pass under `delta_graph` stores values whole at a new root: the payload
    grows, and the next load of that backend reads the row again."""
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        policy = RetentionPolicy(
            history_keep_runs=1,
            history_min_age=timedelta(0),
            delta_graph=chat_graph(None, "delta"),
        )
        graph = chat_graph(inner, "delta")
        for i in range(5):
            graph.invoke(turn(i), thread("d"))
        saver = RetainingSaver(inner)
        backend = saver._backend
        assert isinstance(backend, SqliteBackend)
        before = _load(backend, "d")
        report = saver.enforce_thread_retention("d", policy)
        assert report.materialised and report.deleted
        after = _load(backend, "d")
        assert after == _fresh(inner, "d")
        for key in report.materialised:
            assert "said" in (after.nodes[key].stored or ())
            assert "said" not in (before.nodes[key].stored or ())


def test_the_async_saver_remembers_rows_too(sqlite_path: str) -> None:
    async def main() -> None:
        async with AsyncSqliteSaver.from_conn_string(sqlite_path) as inner:
            graph = chat_graph(inner)
            for i in range(3):
                await graph.ainvoke(turn(i), thread("t"))
            backend = SqliteBackend(inner)
            first = await arun(backend, backend.load_lineage("t"), Mode.READ)
            assert backend.remembered.get("t") is not None
            await graph.ainvoke(turn(3), thread("t"))
            again = await arun(backend, backend.load_lineage("t"), Mode.READ)
            fresh = SqliteBackend(inner)
            assert again == await arun(fresh, fresh.load_lineage("t"), Mode.READ)
            assert set(first.nodes) < set(again.nodes)

    asyncio.run(main())


# Any sequence of what happens to a thread's rows, between loads by one backend


_CHANGES = ["run", "load", "window", "metadata", "delete", "write", "parent"]


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.sampled_from([*_CHANGES, "rewrite"]), min_size=1, max_size=14),
    picks=st.lists(st.integers(0, 10**6), min_size=14, max_size=14),
)
def test_any_history_of_changes_loads_what_a_fresh_backend_loads(
    steps: list[str], picks: list[int]
) -> None:
    """A backend that remembers what it read, under every change to the rows, a payload
    rewritten under its id (to another length) included."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        graph = chat_graph(saver)
        graph.invoke(turn(0), thread("t"))
        _check_history(saver, graph, SqliteBackend(saver), steps, picks)
    finally:
        conn.close()


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.sampled_from(_CHANGES), min_size=1, max_size=14),
    picks=st.lists(st.integers(0, 10**6), min_size=14, max_size=14),
)
def test_any_history_of_runs_through_the_wrapper_loads_what_a_fresh_backend_loads(
    steps: list[str], picks: list[int]
) -> None:
    """Runs through a wrapper whose passes read the thread, so its backend also knows what
    it wrote (and its admissions' passes load through it too). No payload is rewritten
    here: a row the wrapper wrote is taken as put until its first load (the model's
    limit, `_sqlite_lineage`); its metadata is checked by length."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        wrapper = RetainingSaver(saver, retention=EVERY_RUN_KEPT)
        graph = chat_graph(wrapper)
        graph.invoke(turn(0), thread("t"))
        assert isinstance(wrapper._backend, SqliteBackend)
        _check_history(saver, graph, wrapper._backend, steps, picks)
    finally:
        conn.close()


def _check_history(
    saver: SqliteSaver, graph: Any, backend: SqliteBackend, steps: list[str], picks: list[int]
) -> None:
    for n, (step, pick) in enumerate(zip(steps, picks, strict=False)):
        _apply_step(saver, graph, step, pick, n)
        if step in ("load", "window") or n == len(steps) - 1:
            newest = 1 + pick % 6 if step == "window" else None
            assert _load(backend, "t", newest) == _fresh(saver, "t", newest)


def _apply_step(saver: SqliteSaver, graph: Any, step: str, pick: int, n: int) -> None:
    rows = _rows(saver, "t")
    if step == "run" or not rows:
        graph.invoke(turn(n + 1), thread("t"))
        return
    key = rows[pick % len(rows)]
    if step == "rewrite":
        checkpoint = _payload(saver, key)
        checkpoint["channel_versions"] = {**checkpoint["channel_versions"], f"c{n}": str(pick)}
        _rewrite(saver, key, checkpoint=saver.serde.dumps_typed(checkpoint)[1])
    elif step == "metadata":
        _rewrite(saver, key, metadata=_other_length_metadata(saver, key, pick))
    elif step == "delete":
        saver.conn.execute(
            "DELETE FROM checkpoints WHERE thread_id = 't' AND checkpoint_ns = ?"
            " AND checkpoint_id = ?",
            key,
        )
        saver.conn.commit()
    elif step == "write":
        saver.conn.execute(
            "INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,"
            " idx, channel, type, value) VALUES ('t', ?, ?, ?, 0, 'said', 'null', NULL)",
            (*key, f"task-{n}"),
        )
        saver.conn.commit()
    elif step == "parent":
        _rewrite(saver, key, parent_checkpoint_id=rows[(pick // 7) % len(rows)][1])


def _other_length_metadata(saver: SqliteSaver, key: tuple[str, str], pick: int) -> bytes:
    """New metadata for the row, of another length than it has: what a writer of this model
    does (see `_sqlite_lineage`: rows are written once; a rewrite changes a length)."""
    cur = saver.conn.execute(
        "SELECT length(metadata) FROM checkpoints WHERE thread_id = 't' AND checkpoint_ns = ?"
        " AND checkpoint_id = ?",
        key,
    )
    (now,) = cur.fetchone()
    metadata = json.dumps({"source": "loop", "step": pick}).encode()
    return metadata if len(metadata) != now else metadata + b" "


def test_a_foreign_rewrite_that_keeps_every_length_is_not_seen(saver: SqliteSaver) -> None:
    """The stated limit (`_sqlite_lineage`): a row rewritten in place by a writer that is
    neither the saver nor this library, to the same type and byte lengths, is read as it
    was remembered until the backend is made anew. LangGraph's savers never rewrite a row."""
    graph = chat_graph(saver)
    graph.invoke(turn(0), thread("t"))
    backend = SqliteBackend(saver)
    key = _rows(saver, "t")[-1]
    _rewrite(saver, key, metadata=json.dumps({"source": "loop", "step": 1}).encode())
    _load(backend, "t")
    _rewrite(saver, key, metadata=json.dumps({"source": "loop", "step": 2}).encode())
    assert _load(backend, "t").nodes[key].metadata["step"] == 1
    assert _fresh(saver, "t").nodes[key].metadata["step"] == 2


def test_what_the_wrapper_wrote_is_known_without_reading_it(
    sqlite_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        wrapper = RetainingSaver(inner, retention=EVERY_RUN_KEPT)
        backend = wrapper._backend
        assert isinstance(backend, SqliteBackend)
        decodes = Decodes(backend, monkeypatch)
        graph = build_chat_graph(wrapper)
        config: Any = {
            "configurable": {"thread_id": "t", "user_id": "u-1"},
            "metadata": {"team": "ünïcode", "n": 3},
        }
        for i in range(3):
            graph.invoke(chat_turn(i), config)
        read = decodes.count  # the admissions' passes loaded the thread as it grew
        assert backend.written.get("t")  # the last run's rows, not read yet
        loaded = _load(backend, "t")
        assert decodes.count == read  # nothing decoded: every row was written here
        assert loaded == _fresh(inner, "t")
        assert backend.written.get("t") is None  # remembered now, with the rows' lengths
        assert all(n.metadata.get("team") == "ünïcode" for n in loaded.nodes.values())


def test_a_written_row_whose_metadata_is_not_as_put_is_read(sqlite_path: str) -> None:
    """What the stock put would have stored is checked against the row's metadata length:
    a row that holds other metadata (a drifted put, another writer) is read."""
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        wrapper = RetainingSaver(inner, retention=EVERY_RUN_KEPT)
        backend = wrapper._backend
        assert isinstance(backend, SqliteBackend)
        chat_graph(wrapper).invoke(turn(0), thread("t"))
        written = backend.written.get("t") or {}
        key = max(written, key=lambda k: k[1])
        inner.conn.execute(
            "UPDATE checkpoints SET metadata = ? WHERE thread_id = 't' AND checkpoint_ns = ?"
            " AND checkpoint_id = ?",
            (json.dumps({"source": "other", "step": 12345}).encode(), *key),
        )
        inner.conn.commit()
        loaded = _load(backend, "t")
        assert loaded == _fresh(inner, "t")
        assert loaded.nodes[key].metadata["step"] == 12345


class _OwnPut(SqliteSaver):
    def put(self, *args: Any, **kwargs: Any) -> Any:
        return super().put(*args, **kwargs)


def test_a_saver_with_its_own_put_is_read_not_guessed(sqlite_conn: sqlite3.Connection) -> None:
    """The wrapper passes such a saver through untouched; its backend, used alone (as the
    engine does), builds no node from a put either."""
    inner = _OwnPut(sqlite_conn)
    inner.setup()
    chat_graph(inner).invoke(turn(0), thread("t"))
    found = inner.get_tuple(thread("t"))
    assert found is not None
    backend = SqliteBackend(inner)
    backend.stored(found.config, found.checkpoint, found.metadata)
    assert backend.written.get("t") is None
    stock = SqliteBackend(SqliteSaver(sqlite_conn))
    stock.stored(found.config, found.checkpoint, found.metadata)
    assert stock.written.get("t") is not None


def test_the_async_wrapper_knows_what_it_wrote(sqlite_path: str) -> None:
    async def main() -> None:
        async with AsyncSqliteSaver.from_conn_string(sqlite_path) as inner:
            wrapper = RetainingSaver(inner, retention=EVERY_RUN_KEPT)
            backend = wrapper._backend
            assert isinstance(backend, SqliteBackend)
            graph = chat_graph(wrapper)
            for i in range(3):
                await graph.ainvoke(turn(i), thread("t"))
            await wrapper.asettle_history()
            assert backend.written.get("t")
            loaded = await arun(backend, backend.load_lineage("t"), Mode.READ)
            fresh = SqliteBackend(inner)
            assert loaded == await arun(fresh, fresh.load_lineage("t"), Mode.READ)

    asyncio.run(main())


def test_a_put_is_taken_as_put_whatever_its_caller_changes_after(
    saver: SqliteSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a put wrote is known from copies made as it is put (`stored`): versions or
    metadata its caller changes after the put are not what the row holds, and the load
    that takes the row as put gives the row's node all the same."""
    chat_graph(saver).invoke(turn(0), thread("t"))
    found = saver.get_tuple(thread("t"))
    assert found is not None
    backend = SqliteBackend(saver)
    backend.stored(found.config, found.checkpoint, found.metadata)
    versions = found.checkpoint["channel_versions"]
    versions.update({channel: "99999" for channel in versions} | {"added": "1"})
    for seen in found.checkpoint["versions_seen"].values():
        seen["added"] = "1"
    found.checkpoint["versions_seen"]["added"] = {"added": "1"}
    found.metadata["step"] = 12345
    decodes = Decodes(backend, monkeypatch)
    loaded = _load(backend, "t")
    assert decodes.count == len(_rows(saver, "t")) - 1  # the put's row was taken as put
    assert loaded == _fresh(saver, "t")
    assert loaded.nodes[("", found.checkpoint["id"])].metadata["step"] != 12345


def test_a_value_stored_at_a_written_row_forgets_what_was_written(
    sqlite_conn: sqlite3.Connection,
) -> None:
    """A pass loads the rows it plans on first, so this is a guard: what `store_values`
    rewrites is never taken as put."""
    saver = SqliteSaver(sqlite_conn)
    saver.setup()
    chat_graph(saver, "delta").invoke(turn(0), thread("d"))
    found = saver.get_tuple(thread("d"))
    assert found is not None
    backend = SqliteBackend(saver)
    backend.stored(found.config, found.checkpoint, found.metadata)
    key = ("", found.checkpoint["id"])
    assert key in (backend.written.get("d") or {})
    version = str(found.checkpoint["channel_versions"]["said"])
    op = backend.store_values("d", *key, {"said": (version, ["user 0"])})
    assert run(backend, op)
    assert backend.written.get("d") is None
    assert _load(backend, "d") == _fresh(saver, "d")


@pytest.mark.parametrize("saver_class", [SqliteSaver, AsyncSqliteSaver])
def test_the_stock_put_stores_what_a_written_node_is_built_from(
    sqlite_path: str, saver_class: type[Any]
) -> None:
    """What `put_node` copies from the stock savers' `put`, row by row: the payload is
    the serde's dump of the checkpoint, the metadata `sqlite_stored_metadata`'s encoding
    (same keys and values, same byte length). A version of the saver that encodes either
    otherwise fails here; one that merges the config's keys otherwise fails
    `test_what_the_wrapper_wrote_is_known_without_reading_it`."""

    async def main() -> None:
        async with AsyncSqliteSaver.from_conn_string(sqlite_path) as inner:
            await chat_graph(inner).ainvoke(turn(0), _meta_config())
            await _check_rows(inner)

    if saver_class is AsyncSqliteSaver:
        asyncio.run(main())
        return
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        chat_graph(inner).invoke(turn(0), _meta_config())
        cur = inner.conn.execute(_PUT_ROWS_SQL)
        _check_put_rows(inner, list(inner.list(_meta_config())), cur.fetchall())


_PUT_ROWS_SQL = "SELECT checkpoint_id, type, checkpoint, metadata FROM checkpoints"


def _meta_config() -> Any:
    return {"configurable": {"thread_id": "t", "user_id": "u"}, "metadata": {"team": "é"}}


async def _check_rows(inner: AsyncSqliteSaver) -> None:
    tuples = [t async for t in inner.alist(_meta_config())]
    async with inner.conn.execute(_PUT_ROWS_SQL) as cur:
        rows = await cur.fetchall()
    _check_put_rows(inner, tuples, rows)


def _check_put_rows(inner: Any, tuples: list[Any], rows: list[Any]) -> None:
    by_id = {row[0]: row for row in rows}
    assert tuples and len(by_id) == len(tuples)
    for found in tuples:
        _, type_, payload, metadata = by_id[found.checkpoint["id"]]
        assert (type_, payload) == inner.serde.dumps_typed(found.checkpoint)
        put_config = {**_meta_config(), "configurable": {**_meta_config()["configurable"]}}
        put_config["configurable"]["checkpoint_ns"] = ""
        # The run's metadata as put: the stored keys minus what the saver merged in.
        assert json.loads(metadata) == json.loads(
            sqlite_stored_metadata(put_config, {**found.metadata})
        )
        assert len(metadata) == len(sqlite_stored_metadata(put_config, {**found.metadata}))
