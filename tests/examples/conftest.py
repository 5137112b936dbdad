"""What the benchmark helpers' tests share: importing a module of `benchmarks/`, which is
no package (its scripts import each other from their own directory)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench_module(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Import a module of `benchmarks/` by name, with that directory on the path for the
    test alone."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module
