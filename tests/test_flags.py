"""Every constructor flag is validated at construction, naming the flag."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

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
    assert never.admit("custom").skipped == Skip.NOT_MARKED
    always = RetainingSaver(inner, is_reclaimable_leaf=lambda node: True)
    assert len(always.admit("custom").reclaimed) == 1
    # The clone rule still holds: the run head's parent has different versions.
    assert always.admit("custom").skipped == Skip.NOT_A_CLONE


def test_with_allowlist_clone_reads_through_the_new_inner() -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer(allowed_msgpack_modules=[("os", "PathLike")])
    saver = RetainingSaver(InMemorySaver(serde=serde))
    clone = saver.with_allowlist([("my_module", "MyType")])
    assert clone is not saver
    assert clone.inner is not saver.inner
    assert clone.performer.inner is clone.inner
    assert clone.backend is not None and clone.backend.saver is clone.inner
    assert clone.serde is clone.inner.serde
