"""Every constructor flag is validated at construction, naming the flag."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from savers import KINDS, open_sync

from retaining_saver import DeltaHistoryCache, RetainingSaver, Skip
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn


@pytest.mark.parametrize(
    ("flag", "value", "error"),
    [
        ("strict", "yes", TypeError),
        ("admission", "sometimes", ValueError),
        ("history_caches", [object()], TypeError),
        ("protect_checkpoint_ids", "abc", TypeError),
        ("protect_checkpoint_ids", [1, 2], TypeError),
        ("retry_unpinned_reads", 1, TypeError),
        ("strict_pinned_reads", None, TypeError),
        ("is_reclaimable_leaf", "always", TypeError),
        ("on_reclaim", 42, TypeError),
    ],
)
def test_bad_flag_names_itself(flag: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=flag):
        RetainingSaver(InMemorySaver(), **{flag: value})


def test_flags_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        RetainingSaver(InMemorySaver(), True)  # type: ignore[misc]


def test_delta_history_cache_size_is_validated() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        DeltaHistoryCache(0)


def test_is_reclaimable_leaf_replaces_marker_rule() -> None:
    inner = InMemorySaver()
    graph = chat_graph(inner)
    graph.invoke(turn(0), thread("custom"))
    write_duration_leaf(inner, "custom")
    never = RetainingSaver(inner, is_reclaimable_leaf=lambda node: False)
    assert never.admit("custom").skipped == Skip.NOT_A_DURATION_LEAF
    always = RetainingSaver(inner, is_reclaimable_leaf=lambda node: True)
    assert len(always.admit("custom").reclaimed) == 1
    # The clone rule still holds: the run head's parent has different versions.
    assert always.admit("custom").skipped == Skip.PARENT_STATE_DIFFERS


def test_with_allowlist_clone_reads_through_the_new_inner() -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer(allowed_msgpack_modules=[("os", "PathLike")])
    saver = RetainingSaver(InMemorySaver(serde=serde))
    clone = saver.with_allowlist([("my_module", "MyType")])
    assert clone is not saver
    assert clone.inner is not saver.inner
    assert clone._performer.inner is clone.inner
    assert clone._backend is not None and clone._backend.saver is clone.inner
    assert clone.serde is clone.inner.serde


def test_protect_checkpoint_ids_from_a_generator_still_protect() -> None:
    inner = InMemorySaver()
    chat_graph(inner).invoke(turn(0), thread("gen"))
    leaf = write_duration_leaf(inner, "gen")
    saver = RetainingSaver(inner, protect_checkpoint_ids=(i for i in [leaf]))
    assert saver.admit("gen").skipped is Skip.PROTECTED_ID


@pytest.mark.parametrize(
    ("flag", "value"),
    [("history_caches", None), ("history_caches", "cache"), ("reclaimed_id_ttl", 30)],
)
def test_more_bad_flags_name_themselves(flag: str, value: Any) -> None:
    with pytest.raises(TypeError, match=flag):
        RetainingSaver(InMemorySaver(), **{flag: value})


@pytest.mark.parametrize("policy", [{}, 0, "", []])
def test_a_falsy_policy_is_not_the_default(policy: Any) -> None:
    with pytest.raises(TypeError, match="policy"):
        RetainingSaver(InMemorySaver()).enforce_thread_retention("t", policy)


@pytest.mark.parametrize("thread_id", [None, 5, b"t", ""])
def test_engine_entry_points_refuse_a_thread_id_that_is_not_a_str(thread_id: Any) -> None:
    saver = RetainingSaver(InMemorySaver())
    with pytest.raises(TypeError, match="thread_id"):
        saver.enforce_thread_retention(thread_id)
    with pytest.raises(TypeError, match="thread_id"):
        saver.admit(thread_id)
    if thread_id is not None:
        with pytest.raises(TypeError, match="thread_id"):
            saver.storage_stats(thread_id)


async def test_a_str_of_thread_ids_is_refused_not_iterated() -> None:
    saver = RetainingSaver(InMemorySaver())
    with pytest.raises(TypeError, match="thread_ids"):
        list(saver.enforce_retention("5None"))
    with pytest.raises(TypeError, match="thread_ids"):
        [r async for r in saver.aenforce_retention("5None")]
    with pytest.raises(TypeError, match="thread_ids"):
        list(saver.enforce_retention([None]))  # type: ignore[list-item]


def _outcome(saver: Any, thread_id: Any) -> Any:
    try:
        return chat_graph(saver).invoke(turn(0), {"configurable": {"thread_id": thread_id}})
    except Exception as error:
        return type(error).__name__


@contextmanager
def _two_stores(kind: str, request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """Two empty stores of `kind`: the bare run and the wrapped one must not meet."""
    with open_sync(kind, request) as first, open_sync(kind, request, "second") as second:
        yield first, second


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("thread_id", [None, 5])
def test_a_run_on_a_thread_id_that_is_not_a_str_does_what_the_bare_run_does(
    kind: str, thread_id: Any, request: pytest.FixtureRequest
) -> None:
    """LangGraph itself turns 5 into "5"; None reaches the saver as None, and the
    wrapper hands it on untouched (never admitted into a thread named "None")."""
    with _two_stores(kind, request) as (bare, inner):
        saver = RetainingSaver(inner)
        assert _outcome(saver, thread_id) == _outcome(bare, thread_id)
        if thread_id is None:
            assert saver.counters.attempted == 0
            named_none: Any = {"configurable": {"thread_id": "None"}}
            assert (saver.get_tuple(named_none) is None) == (bare.get_tuple(named_none) is None)
