"""The upstream conformance suite passes as well through `RetainingSaver` as on the bare saver.

`langgraph-checkpoint-conformance` runs one suite per capability, each against
a fresh saver from a factory. Every factory here hands out a saver over an
empty store (a new `InMemorySaver`, a new SQLite file, a new PostgreSQL
database), so no suite sees rows another suite left behind. Each backend is
validated bare and wrapped, and the two reports must agree.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks
from savers import new_store, open_async_at

from retaining_saver import RetainingSaver

OpenSaver = Callable[[], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]

# Tests the bare savers pass with the pinned versions (constraints.txt); a drop
# means the suite silently stopped running something.
MIN_BARE_PASSED = {"InMemorySaver": 58, "AsyncSqliteSaver": 58, "AsyncPostgresSaver": 66}


@dataclass
class Outcome:
    """One validation run: the report and the name of every test that passed."""

    report: CapabilityReport
    passed_tests: set[tuple[str, str]] = field(default_factory=set)

    @property
    def passed(self) -> int:
        return sum(result.tests_passed for result in self.report.results.values())

    @property
    def failed(self) -> int:
        return sum(result.tests_failed for result in self.report.results.values())

    def summary(self) -> str:
        return f"{self.passed} passed / {self.failed} failed"


async def run_suite(name: str, open_saver: OpenSaver, *, wrapped: bool) -> Outcome:
    """Validate the savers `open_saver` yields, wrapped in `RetainingSaver` if asked."""

    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        async with open_saver() as inner:
            yield RetainingSaver(inner) if wrapped else inner

    label = f"RetainingSaver({name})" if wrapped else name
    registered = checkpointer_test(name=label)(factory)
    passed_tests: set[tuple[str, str]] = set()

    def on_result(capability: str, test: str, ok: bool, error: str | None) -> None:
        if ok:
            passed_tests.add((capability, test))

    report = await validate(registered, progress=ProgressCallbacks(on_test_result=on_result))
    return Outcome(report, passed_tests)


# What the wrapper adds over a saver that lacks it, on every supported saver: `prune`,
# `delete_for_runs` and `copy_thread` (upstream Postgres has only `prune`).
ADDED = {
    "InMemorySaver": {"prune", "delete_for_runs", "copy_thread"},
    "AsyncSqliteSaver": {"prune", "delete_for_runs", "copy_thread"},
    "AsyncPostgresSaver": {"delete_for_runs", "copy_thread"},
}


def assert_wrapped_matches(bare: Outcome, wrapped: Outcome, added: set[str]) -> None:
    """The wrapper passes every test the bare saver passes, capability by capability,
    and every test of a capability it adds (`added`)."""
    lost = sorted(bare.passed_tests - wrapped.passed_tests)
    failures = [f for r in wrapped.report.results.values() for f in r.failures]
    assert not lost, f"tests that pass bare but fail wrapped: {lost}\n" + "\n".join(failures)
    assert wrapped.failed == 0, "\n".join(failures)
    assert bare.report.results.keys() == wrapped.report.results.keys()
    for capability, bare_result in bare.report.results.items():
        wrapped_result = wrapped.report.results[capability]
        if capability in added:
            assert not bare_result.detected and wrapped_result.detected, capability
            assert wrapped_result.tests_passed > 0 and wrapped_result.passed, capability
            continue
        assert wrapped_result.detected == bare_result.detected, capability
        assert wrapped_result.tests_passed == bare_result.tests_passed, capability


def extra_note(bare: Outcome, wrapped: Outcome, added: set[str]) -> str:
    """What the difference in pass counts means, so that more never reads as a regression."""
    extra = wrapped.passed - bare.passed
    if not extra:
        return " (the same tests)"
    return f" (+{extra}: the tests of {', '.join(sorted(added))}, which the wrapper adds)"


KIND_OF = {
    "InMemorySaver": "memory",
    "AsyncSqliteSaver": "sqlite",
    "AsyncPostgresSaver": "postgres",
}


def opener_for(backend: str, request: pytest.FixtureRequest) -> OpenSaver:
    """Open a `backend` saver on a new, empty store each time (a new `InMemorySaver`,
    a new SQLite file, a new database, dropped after use); Postgres goes through
    `pg_server` (skip or fail)."""
    kind = KIND_OF[backend]
    if kind == "postgres":
        request.getfixturevalue("pg_server")  # skip or fail here, not inside a suite

    @asynccontextmanager
    async def open_fresh() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        with new_store(kind, request) as target:
            async with open_async_at(kind, target) as saver:
                yield saver

    return open_fresh


@pytest.mark.parametrize("backend", list(MIN_BARE_PASSED))
async def test_conformance_wrapped_matches_bare(
    backend: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    open_saver = opener_for(backend, request)
    bare = await run_suite(backend, open_saver, wrapped=False)
    wrapped = await run_suite(backend, open_saver, wrapped=True)
    with capsys.disabled():
        print(
            f"\nconformance {backend}: bare {bare.summary()}, wrapped {wrapped.summary()}"
            f"{extra_note(bare, wrapped, ADDED[backend])}"
        )
    assert bare.failed == 0, f"bare {backend} fails upstream tests: {bare.report.to_dict()}"
    assert bare.passed >= MIN_BARE_PASSED[backend]
    assert_wrapped_matches(bare, wrapped, {str(a) for a in ADDED[backend]})
