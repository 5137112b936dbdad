"""The take is guarded by what it proved: changes made after the proof stop it.

Admission proves a leaf reclaimable from the head it read, then takes it in
one transaction: on memory and SQLite the rules judge rows re-read inside it,
on Postgres one statement re-checks every precondition of the `Deletion`.
Between the proof and the take another process may add a child (even one
whose id sorts first), a write or a newer sibling, rewrite the leaf (with or
without its marker, or with other state) or its parent under the same id,
re-parent the leaf, or delete it. For
any set of such changes: with none, the leaf is taken; with any that breaks a
precondition, nothing is; and whatever is taken, the rules accept on the facts
the backend judged. Postgres's admission read, which judges the head in the
statement that takes it, takes exactly what `leaf_verdict` accepts on the rows
as they are, and answers, taken or not, what the saver's own read answers
just after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6
from savers import KINDS, open_sync

import retaining_saver._rules as rules
from retaining_saver import RetainingSaver
from retaining_saver._admission import node_of
from retaining_saver._effects import run
from retaining_saver.backends._base import Backend, Mode
from retaining_saver.backends._head_reader import OneRoundBackend
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, thread_config

Mutation = Callable[[BaseCheckpointSaver[Any], Backend, CheckpointTuple, CheckpointTuple], None]


def _pinned(of: CheckpointTuple) -> RunnableConfig:
    return {"configurable": dict(of.config["configurable"])}


def _copy(of: CheckpointTuple, **changes: Any) -> dict[str, Any]:
    checkpoint = dict(of.checkpoint)
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    checkpoint.update(changes)
    return checkpoint


def _add_child(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    inner.put(_pinned(leaf), _copy(leaf), {"source": "loop", "step": 9}, {})


def _add_child_sorting_first(
    inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any
) -> None:
    # Its id sorts below every other, so only the childless check can see it.
    checkpoint = {**_copy(leaf), "id": "00000000-0000-6000-8000-000000000000"}
    inner.put(_pinned(leaf), checkpoint, {"source": "loop", "step": 9}, {})


def _add_write(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    inner.put_writes(_pinned(leaf), [("said", "late")], "late-task")


def _add_newer_sibling(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    inner.put(_pinned(parent), _copy(parent), {"source": "loop", "step": 9}, {})


def _change_parent(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    checkpoint = dict(parent.checkpoint)
    versions = dict(checkpoint["channel_versions"])
    versions["said"] = inner.get_next_version(versions.get("said"), None)
    checkpoint["channel_versions"] = versions
    inner.put(parent.parent_config, checkpoint, parent.metadata, {})


def _rewritten(of: CheckpointTuple, key: str) -> dict[str, Any]:
    """`of`'s checkpoint under its own id, with one entry of `key`'s map changed.

    The change names the row, so a leaf and a parent rewritten alike still differ.
    """
    checkpoint = dict(of.checkpoint)
    mark = str(of.checkpoint["id"])
    if key == "channel_versions":
        versions = dict(checkpoint[key])
        channel = min(versions)
        versions[channel] = f"{versions[channel]}.{mark}"
        checkpoint[key] = versions
    else:
        checkpoint[key] = {**checkpoint[key], "rewriter": {"__start__": mark}}
    return checkpoint


def _change_parent_format(inner: Any, backend: Backend, leaf: Any, parent: Any) -> None:
    # Below format 4 a checkpoint reads its pending sends from its parent's writes: a
    # leaf of another format than its parent's is no clone of it.
    inner.put(parent.parent_config, {**parent.checkpoint, "v": 3}, parent.metadata, {})


def _change_parent_history(inner: Any, backend: Backend, leaf: Any, parent: Any) -> None:
    inner.put(parent.parent_config, _rewritten(parent, "versions_seen"), parent.metadata, {})


def _change_leaf_versions(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    inner.put(leaf.parent_config, _rewritten(leaf, "channel_versions"), leaf.metadata, {})


def _change_leaf_history(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    inner.put(leaf.parent_config, _rewritten(leaf, "versions_seen"), leaf.metadata, {})


def _reparent_leaf(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    # Onto its grandparent, as a graft would: the parent stays, the newest two ids too.
    grandparent = parent.parent_config["configurable"]["checkpoint_id"]
    parent_id = parent.config["configurable"]["checkpoint_id"]
    change = ("", leaf.checkpoint["id"], parent_id, grandparent)
    assert run(backend, backend.set_parents(_thread(leaf), [change])) == 1


def _delete_leaf(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    assert run(backend, backend.delete_checkpoint(_thread(leaf), "", leaf.checkpoint["id"]))


def _unmark_leaf(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    # Same id, ts and versions: only the metadata tells it is no stamp now.
    inner.put(leaf.parent_config, leaf.checkpoint, {"source": "loop", "step": 9}, {})


def _rewrite_leaf(inner: Any, backend: Backend, leaf: CheckpointTuple, parent: Any) -> None:
    checkpoint = {**leaf.checkpoint, "ts": "2000-01-01T00:00:00+00:00"}
    inner.put(leaf.parent_config, checkpoint, leaf.metadata, {})


BREAKING: dict[str, Mutation] = {
    "child": _add_child,
    "child-sorting-first": _add_child_sorting_first,
    "write": _add_write,
    "newer-sibling": _add_newer_sibling,
    "parent-changed": _change_parent,
    "parent-history-changed": _change_parent_history,
    "parent-format-changed": _change_parent_format,
    "leaf-versions-changed": _change_leaf_versions,
    "leaf-history-changed": _change_leaf_history,
    "leaf-reparented": _reparent_leaf,
    "leaf-gone": _delete_leaf,
    "leaf-unmarked": _unmark_leaf,
}
# Still a reclaimable clone under the same id: taking it or not are both sound.
NEUTRAL: dict[str, Mutation] = {"leaf-rewritten": _rewrite_leaf}


def _thread(of: CheckpointTuple) -> str:
    return str(of.config["configurable"]["thread_id"])


def _each_change_alone(test: Any) -> Any:
    """Always try no change, every change alone, and a leaf and parent rewritten alike:
    the random sets may miss one."""
    for name in [*BREAKING, *NEUTRAL]:
        test = example({name})(test)
    test = example({"leaf-history-changed", "parent-history-changed", "parent-changed"})(test)
    return example(set())(test)


def _take(
    via: str, backend: Backend, saver: RetainingSaver, thread_id: str, proven: Any, root: Any
) -> bool:
    """Take `proven` through `via`; check what it answers besides; whether it was taken."""
    if via == "reclaim_leaf":
        answer = run(
            backend,
            backend.reclaim_leaf(thread_id, proven, saver.policy, frozenset()),
            Mode.GUARDED,
        )
        if isinstance(answer, rules.LeafFacts):
            verdict = rules.leaf_verdict(answer, saver.policy, frozenset())
            assert isinstance(verdict, rules.Deletion)
        return isinstance(answer, rules.LeafFacts)
    # The one-round read judges the head itself: it takes exactly what the rules would,
    # judged on the rows as they are now.
    head = run(backend, backend.head_node(thread_id, ""), Mode.READ)
    assert head is not None
    facts = run(
        backend, backend.leaf_facts(thread_id, "", head.checkpoint_id, head.parent_id), Mode.READ
    )
    verdict = rules.leaf_verdict(facts, saver.policy, frozenset())
    marker = rules.DURATION_MARKER
    assert isinstance(backend, OneRoundBackend)
    taken, row = run(
        backend,
        backend.admit_and_read(thread_id, "", marker, frozenset(), "guard-token"),
        Mode.GUARDED,
    )
    assert (taken is not None) == isinstance(verdict, rules.Deletion), (taken, verdict)
    assert taken is None or taken == head.checkpoint_id
    built = backend.read_tuple(row)
    bare = saver.inner.get_tuple(root)
    assert bare is not None
    if built is None:  # a pre-v4 row: the caller reads it through the saver (its migration)
        assert row["checkpoint"].get("v", 0) < 4
        return taken == proven.checkpoint_id
    assert (built.config, built.checkpoint, built.metadata) == (
        bare.config,
        bare.checkpoint,
        bare.metadata,
    )
    assert (built.parent_config, built.pending_writes) == (bare.parent_config, bare.pending_writes)
    return taken == proven.checkpoint_id


# `admit_and_read` is Postgres's alone (a `OneRoundBackend`).
WAYS = [(kind, "reclaim_leaf") for kind in KINDS] + [("postgres", "admit_and_read")]


@pytest.mark.parametrize(("kind", "via"), WAYS)
def test_take_is_guarded_by_what_it_proved(
    kind: str, via: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        backend = saver._backend
        assert backend is not None
        graph = build_chat_graph(inner)
        threads = iter(range(10_000))

        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(st.sets(st.sampled_from(sorted(BREAKING) + sorted(NEUTRAL))))
        @_each_change_alone
        def check(changes: set[str]) -> None:
            thread_id = f"guard-{next(threads)}"
            graph.invoke(chat_turn(0), thread_config(thread_id))
            leaf_id = write_duration_leaf(inner, thread_id)
            root: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            leaf = inner.get_tuple(root)
            assert leaf is not None and leaf.checkpoint["id"] == leaf_id
            assert leaf.parent_config is not None
            parent = inner.get_tuple(leaf.parent_config)
            assert parent is not None
            proven = node_of(leaf)
            # Rewrites first: a rewrite after the delete would write the leaf back.
            for name in sorted(changes, key=lambda n: (n in BREAKING, n == "leaf-gone", n)):
                {**NEUTRAL, **BREAKING}[name](inner, backend, leaf, parent)

            taken = _take(via, backend, saver, thread_id, proven, root)
            if taken:
                assert inner.get_tuple(_pinned(leaf)) is None
            if not changes:
                assert taken
            if changes & set(BREAKING):
                assert not taken, changes
                if "leaf-gone" not in changes:
                    assert inner.get_tuple(_pinned(leaf)) is not None

        check()
