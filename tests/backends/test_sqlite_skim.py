"""SQLite lineage loads skim each payload: a node read with every extension value
(messages, models, delta snapshots) left undecoded equals the node the saver's own
serde decode gives, and anything the skim cannot vouch for is decoded whole."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from retaining_saver._transact import run
from retaining_saver.backends import backend_for
from retaining_saver.backends._sqlite_plan import (
    checkpoint_of,
    node_fields,
    node_of,
    skimmed_fields,
)
from retaining_saver.backends._upstream import delta_snapshot
from retaining_saver.testing.graphs import build_chat_graph, chat_graph, chat_turn, thread, turn

SERDE = JsonPlusSerializer()


@pytest.fixture
def saver(sqlite_conn: sqlite3.Connection) -> SqliteSaver:
    saved = SqliteSaver(sqlite_conn)
    saved.setup()
    return saved


def _rows(saver: SqliteSaver, thread_id: str) -> list[dict[str, Any]]:
    cur = saver.conn.execute(
        "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"
        " FROM checkpoints WHERE thread_id = ?",
        (thread_id,),
    )
    names = [c[0] for c in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _as_decoded(saver: SqliteSaver, row: dict[str, Any], write_count: int = 0) -> Any:
    return node_of(row, checkpoint_of(saver, row), write_count)


def test_a_message_thread_loads_the_nodes_a_whole_decode_gives(saver: SqliteSaver) -> None:
    graph = build_chat_graph(saver)
    for i in range(4):
        graph.invoke(chat_turn(i), thread("t"))
    rows = _rows(saver, "t")
    assert rows and all(r["type"] == "msgpack" for r in rows)
    # The skim is what loads: no message is rebuilt for a node.
    assert all(skimmed_fields(r["checkpoint"]) is not None for r in rows)
    backend = backend_for(saver)
    assert backend is not None
    loaded = run(backend, backend.load_lineage("t"))
    assert loaded.nodes.keys() == {(r["checkpoint_ns"], r["checkpoint_id"]) for r in rows}
    for row in rows:
        node = loaded.nodes[row["checkpoint_ns"], row["checkpoint_id"]]
        assert node == _as_decoded(saver, row, node.write_count)


def test_delta_state_keeps_which_channels_a_checkpoint_stores(saver: SqliteSaver) -> None:
    graph = chat_graph(saver, "delta")
    for i in range(5):
        graph.invoke(turn(i), thread("d"))
    for row in _rows(saver, "d"):
        assert node_of(row, node_fields(saver, row), 0) == _as_decoded(saver, row)


_versions = st.one_of(st.integers(0, 10**6), st.text(max_size=40), st.floats(allow_nan=False))
_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.text(max_size=20),
        st.binary(max_size=20),
        st.builds(HumanMessage, st.text(max_size=30)),
        st.builds(AIMessage, st.text(max_size=30)),
        st.builds(delta_snapshot, st.lists(st.text(max_size=5), max_size=3)),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)
_channels = st.text(min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    versions=st.dictionaries(_channels, _versions, max_size=5),
    seen=st.dictionaries(_channels, st.dictionaries(_channels, _versions, max_size=3), max_size=4),
    values=st.dictionaries(_channels, _values, max_size=4),
    ts=st.text(max_size=32),
    v=st.sampled_from([1, 2, 3, 4, None]),
)
def test_any_payload_skims_to_the_node_its_decode_gives(
    versions: dict[str, Any], seen: dict[str, Any], values: dict[str, Any], ts: str, v: Any
) -> None:
    checkpoint = {
        "v": v,
        "id": "1",
        "ts": ts,
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": seen,
    }
    type_, payload = SERDE.dumps_typed(checkpoint)
    row = {"checkpoint_ns": "", "checkpoint_id": "1", "parent_checkpoint_id": None}
    row |= {"type": type_, "checkpoint": payload, "metadata": b"{}"}
    skimmed = skimmed_fields(payload)
    assert skimmed is not None
    assert node_of(row, skimmed, 0) == node_of(row, SERDE.loads_typed((type_, payload)), 0)


def test_a_version_that_is_an_extension_value_is_decoded_whole() -> None:
    # Versions are strings, numbers today; were one ever an object, the skim would read
    # None for it, so it declines and the serde decodes the payload.
    checkpoint = {"v": 4, "ts": "", "channel_values": {}, "channel_versions": {"a": {1, 2}}}
    assert skimmed_fields(SERDE.dumps_typed(checkpoint)[1]) is None
    seen = {"v": 4, "channel_versions": {}, "versions_seen": {"n": {"a": {1}}}}
    assert skimmed_fields(SERDE.dumps_typed(seen)[1]) is None


@pytest.mark.parametrize(
    "payload",
    [ormsgpack.packb([1, 2]), b"\xc1", ormsgpack.packb({"channel_values": [1]})],
    ids=["not-a-map", "not-msgpack", "values-not-a-map"],
)
def test_what_the_skim_cannot_vouch_for_is_left_to_the_serde(payload: bytes) -> None:
    assert skimmed_fields(payload) is None


class CountingSerde(JsonPlusSerializer):
    """A serde of the app's own: its decode may differ, so it decodes every payload."""

    calls = 0

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type(self).calls += 1
        return super().loads_typed(data)


def test_an_apps_own_serde_decodes_every_payload(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "own.sqlite", check_same_thread=False)
    try:
        saver = SqliteSaver(conn, serde=CountingSerde())
        saver.setup()
        chat_graph(saver).invoke(turn(0), thread("t"))
        rows = _rows(saver, "t")
        before = CountingSerde.calls
        for row in rows:
            node_fields(saver, row)
        assert CountingSerde.calls - before == len(rows)
    finally:
        conn.close()
