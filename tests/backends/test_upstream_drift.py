"""A fast path built on upstream internals turns itself off when they drift.

`backends/_upstream/` lists what was audited. A saver whose statements or
attributes differ gets one warning, no fast path, and the same answers through
its own calls: admission still reclaims, and the run reads what the bare saver
reads.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from savers import KINDS, open_async, open_sync
from spies import Recorder

import retaining_saver.backends._upstream as upstream
from retaining_saver import RetainingSaver, backends
from retaining_saver.backends import backend_for
from retaining_saver.testing import awrite_duration_leaf, write_duration_leaf
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, run_read, thread_config

# One change per kind that the audit must notice, each harmless to the saver itself.
_DRIFTS = {
    "memory": ("MEMORY_ATTRIBUTES", (*upstream.MEMORY_ATTRIBUTES, "_renamed_upstream")),
    "sqlite": ("SQLITE_PENDING_WRITES_SQL_SHA256", "0" * 64),
    "postgres": ("POSTGRES_SELECT_SQL_SHA256", "0" * 64),
}


@pytest.fixture
def drifted(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    monkeypatch.setattr(upstream, *_DRIFTS[kind])
    monkeypatch.setattr(backends, "_warned", set())  # each test sees its one warning
    return kind


def test_the_installed_savers_match_the_audit(request: pytest.FixtureRequest) -> None:
    for kind in KINDS:
        with open_sync(kind, request) as inner:
            assert upstream.drift(kind, inner) == []


def _check(answer: Any, bare: Any, saver: RetainingSaver) -> None:
    assert answer is not None and bare is not None
    assert (answer.config, answer.checkpoint, answer.metadata) == (
        bare.config,
        bare.checkpoint,
        bare.metadata,
    )
    assert answer.pending_writes == bare.pending_writes
    assert saver.counters.reclaimed == 1


def _wrapped(inner: BaseCheckpointSaver[Any], caplog: pytest.LogCaptureFixture) -> RetainingSaver:
    with caplog.at_level(logging.WARNING, logger="retaining_saver"):
        saver = RetainingSaver(inner)
    assert saver._backend is not None and not saver._backend.matches_audit
    assert saver._one_round is None
    assert any("fast paths are off" in r.getMessage() for r in caplog.records)
    return saver


@pytest.mark.parametrize("drifted", KINDS, indirect=True)
def test_a_drifted_saver_answers_through_its_own_read(
    drifted: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    with open_sync(drifted, request) as inner:
        saver = _wrapped(inner, caplog)
        build_chat_graph(saver).invoke(chat_turn(0), thread_config("d"))
        write_duration_leaf(saver, "d")
        reads = Recorder(inner, ["get_tuple"])
        answer = saver.get_tuple(run_read("d"))
        assert reads.count("get_tuple") == 2, "the head, then the parent: both by the saver"
        _check(answer, inner.get_tuple(thread_config("d")), saver)


@pytest.mark.parametrize("drifted", KINDS, indirect=True)
async def test_a_drifted_saver_answers_through_its_own_read_async(
    drifted: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_async(drifted, request) as inner:
        saver = _wrapped(inner, caplog)
        assert backend_for(inner) is not None
        await build_chat_graph(saver).ainvoke(chat_turn(0), thread_config("d"))
        await awrite_duration_leaf(saver, "d")
        reads = Recorder(inner, ["aget_tuple"])
        answer = await saver.aget_tuple(run_read("d"))
        assert reads.count("aget_tuple") == 2, "the head, then the parent: both by the saver"
        _check(answer, await inner.aget_tuple(thread_config("d")), saver)


def test_the_tuple_builders_use_only_audited_internals() -> None:
    """Every private saver attribute the copied tuple builders touch is in the audit, so a
    saver that lost one turns the fast paths that build tuples off."""
    import ast
    from pathlib import Path

    import retaining_saver.backends._upstream.tuples as tuples

    audited = {
        *upstream.POSTGRES_ATTRIBUTES,
        *upstream.SQLITE_ATTRIBUTES,
        *upstream.MEMORY_ATTRIBUTES,
    }
    used = {
        node.attr
        for node in ast.walk(ast.parse(Path(tuples.__file__).read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "saver"
        and node.attr.startswith("_")
    }
    assert used, "the builders call the savers' private helpers"
    assert used <= audited, f"unaudited: {sorted(used - audited)}"
