"""The retention contract on every backend, with full and DeltaChannel state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from savers import KINDS, open_sync

from retaining_saver.testing.graphs import FLAVORS
from retaining_saver.testing.scenarios import SCENARIOS


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("kind", KINDS)
def test_contract(kind: str, flavor: Any, name: str, request: pytest.FixtureRequest) -> None:
    opened = [0]

    @contextmanager
    def fresh() -> Iterator[BaseCheckpointSaver[Any]]:
        opened[0] += 1
        if opened[0] > 1:
            raise AssertionError("a scenario opens one saver")
        with open_sync(kind, request) as saver:
            yield saver

    SCENARIOS[name](fresh, flavor)
