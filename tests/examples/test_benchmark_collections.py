"""`benchmarks/_common.full_collections` records the full cyclic collections of a block,
and only those (what bench_bounding prints as the collections a stretch paid); `frozen_heap`
freezes the heap for a block only when asked."""

from __future__ import annotations

import gc
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def common(bench_module: Callable[[str], ModuleType]) -> ModuleType:
    return bench_module("_common")


def test_each_full_collection_is_recorded_once(common: ModuleType) -> None:
    with common.full_collections() as paid:
        gc.collect()
        gc.collect()
    assert len(paid) == 2 and all(ms >= 0 for ms in paid)


def test_young_collections_are_not_full_ones(common: ModuleType) -> None:
    with common.full_collections() as paid:
        gc.collect(0)
        gc.collect(1)
    assert paid == []


def test_the_recorder_is_removed_when_the_block_ends(common: ModuleType) -> None:
    before = list(gc.callbacks)
    with common.full_collections() as paid:
        pass
    gc.collect()
    assert paid == [] and gc.callbacks == before
    assert "full collection(s)" in common.collections_paid(paid, 1.0)


def test_the_heap_is_frozen_only_inside_the_block_and_only_when_asked(
    common: ModuleType,
) -> None:
    before = gc.get_freeze_count()
    with common.frozen_heap(False):
        assert gc.get_freeze_count() == before
    with common.frozen_heap(True):
        assert gc.get_freeze_count() > before
    assert gc.get_freeze_count() == before
