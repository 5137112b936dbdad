"""Rolling back a resume the store alone cannot undo, against a twin thread (issue #22).

Two shapes, on every backend, sync and async: a node answered by two runs in turn
(`interrupt('first')`, then `interrupt('second')`: run-1 answers the first and writes
no checkpoint, run-resume the second, and each resume replaced the answer stored on
the checkpoint in place), and a run that crashed in the middle of a step (a parallel
task's writes stored on the checkpoint, none of the crashed task's) resumed by
`invoke(None)`. Rolled back, run-resume leaves the thread exactly as the twin, which
never had it, because the wrapper's resume ledger recorded the checkpoint's writes
before run-resume's first write there (`_rules._resumed`).
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections import Counter
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from law_kit import law_graph, user_turn
from savers import KINDS, open_async, open_sync
from sweep_kit import IDLE_FOR, set_clock
from test_run_rollback import aview, roll_back_against_twin, view
from test_thread_ops import TARGET, TWIN, run_config

from retaining_saver import IdleThreadPolicy, RetainingSaver, RetentionSweeper, SweepOutcome
from retaining_saver._effects import run
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import thread


class Said(TypedDict, total=False):
    said: Annotated[list[str], operator.add]


def _asking_twice(state: Said) -> dict[str, Any]:
    return {"said": [f"{interrupt('first')} {interrupt('second')}"]}


def asking_graph(saver: RetainingSaver) -> Any:
    builder: Any = StateGraph(Said)
    builder.add_node("asking", _asking_twice)
    builder.add_edge(START, "asking")
    builder.add_edge("asking", END)
    return builder.compile(checkpointer=saver)


class Crash(GraphBubbleUp):
    """Stops the run with no write for the task that raised it (LangGraph stores none for
    a `GraphBubbleUp`): the store is left as a worker's crash leaves it mid-step, with
    the finished tasks' writes only."""


def _run_of(config: RunnableConfig) -> str:
    return str(config.get("metadata", {}).get("run_id"))


def _steady(state: Said) -> dict[str, Any]:
    return {"said": ["steady"]}


def _finished(head: Any) -> bool:
    return head is not None and any(ch == "said" for _, ch, _ in head.pending_writes or ())


def _crash_once_steady_landed(saver: RetainingSaver, config: RunnableConfig) -> None:
    """Crash run-a's `flaky` once `steady`'s writes are stored (read through the inner
    saver from this thread: an async one answers a sync read off its loop)."""
    read = thread(config["configurable"]["thread_id"])
    for _ in range(500):
        if _finished(saver.inner.get_tuple(read)):
            raise Crash("the worker died")
        time.sleep(0.02)
    raise AssertionError("steady's writes never landed")


def crashing_graph(saver: RetainingSaver) -> Any:
    """`steady` and `flaky` in one step; on run-a, `flaky` waits until `steady`'s writes
    are stored, then the run crashes."""

    def flaky(state: Said, config: RunnableConfig) -> dict[str, Any]:
        if _run_of(config) == "run-a":
            _crash_once_steady_landed(saver, config)
        return {"said": ["flaky"]}

    async def aflaky(state: Said, config: RunnableConfig) -> dict[str, Any]:
        if _run_of(config) == "run-a":
            await asyncio.to_thread(_crash_once_steady_landed, saver, config)
        return {"said": ["flaky"]}

    builder: Any = StateGraph(Said)
    builder.add_node("steady", _steady)
    builder.add_node("flaky", RunnableLambda(flaky, afunc=aflaky))
    for name in ("steady", "flaky"):
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    return builder.compile(checkpointer=saver)


async def aroll_back_against_twin(graph: Any, saver: RetainingSaver, given: Any) -> None:
    """`roll_back_against_twin`, async, rolled back as the Agent Server does: two calls at
    once, then one more."""
    await graph.ainvoke(given, run_config(TARGET, "run-resume"))
    assert await aview(graph, saver, TARGET) != await aview(graph, saver, TWIN)
    await asyncio.gather(*(saver.adelete_for_runs(["run-resume"]) for _ in range(2)))
    await saver.adelete_for_runs(["run-resume"])
    assert await aview(graph, saver, TARGET) == await aview(graph, saver, TWIN)
    assert (await aintegrity(saver.inner, TARGET)).clean
    for t in (TARGET, TWIN):
        await graph.ainvoke(given, run_config(t, "run-later"))
    assert await aview(graph, saver, TARGET) == await aview(graph, saver, TWIN)


@pytest.mark.parametrize("kind", KINDS)
def test_a_node_answered_by_two_runs_keeps_the_first_answer(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = asking_graph(saver)
        for t in (TARGET, TWIN):
            graph.invoke({"said": []}, run_config(t, "run-0"))
            graph.invoke(Command(resume="one"), run_config(t, "run-1"))
        roll_back_against_twin(graph, saver, Command(resume="two"), view)


@pytest.mark.parametrize("kind", KINDS)
async def test_async_a_node_answered_by_two_runs_keeps_the_first_answer(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = asking_graph(saver)
        for t in (TARGET, TWIN):
            await graph.ainvoke({"said": []}, run_config(t, "run-0"))
            await graph.ainvoke(Command(resume="one"), run_config(t, "run-1"))
        await aroll_back_against_twin(graph, saver, Command(resume="two"))


@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_the_answer_run_alone_restores_the_interrupt(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """run-1 wrote no checkpoint (it interrupted again): its ledger entry finds it, and
    rolling it back leaves the thread waiting for the first answer, as after run-0."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = asking_graph(saver)
        graph.invoke({"said": []}, run_config(TWIN, "run-0"))
        graph.invoke({"said": []}, run_config(TARGET, "run-0"))
        roll_back_against_twin(graph, saver, Command(resume="one"), view)


def _crash(graph: Any, saver: RetainingSaver, thread_id: str) -> None:
    with pytest.raises(Crash):
        graph.invoke({"said": []}, run_config(thread_id, "run-a"))
    head = saver.inner.get_tuple(thread(thread_id))
    assert head is not None  # the crash left steady's writes only
    assert sorted(ch for _, ch, _ in head.pending_writes or ()) == ["said"]


@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_the_resume_of_a_crashed_run_keeps_its_finished_tasks(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = crashing_graph(saver)
        for t in (TARGET, TWIN):
            _crash(graph, saver, t)
        roll_back_against_twin(graph, saver, None, view)


@pytest.mark.parametrize("kind", KINDS)
async def test_async_rolling_back_the_resume_of_a_crashed_run_keeps_its_finished_tasks(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = crashing_graph(saver)
        for t in (TARGET, TWIN):
            with pytest.raises(Crash):
                await graph.ainvoke({"said": []}, run_config(t, "run-a"))
            head = await inner.aget_tuple(thread(t))
            assert head is not None
            assert sorted(ch for _, ch, _ in head.pending_writes or ()) == ["said"]
        await aroll_back_against_twin(graph, saver, None)


@pytest.mark.parametrize("kind", KINDS)
def test_only_a_resume_records_an_entry(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs that go on from new input write only on their own checkpoints: no ledger
    statement on their path. A resume records one entry, at its first write on the
    checkpoint it resumes, whatever it writes there after."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        backend = saver._backend
        assert backend is not None
        noted: Counter[str] = Counter()
        note = backend.note_resume

        def counting(thread_id: str, ns: str, checkpoint_id: str, run_id: str) -> Any:
            noted[run_id] += 1
            return note(thread_id, ns, checkpoint_id, run_id)

        monkeypatch.setattr(backend, "note_resume", counting)
        graph = law_graph(saver, "delta")
        for run_id, given in (("run-a", user_turn("a")), ("run-b", user_turn("b", ask=True))):
            graph.invoke(given, run_config(TARGET, run_id))
        assert noted == Counter()
        graph.invoke(Command(resume="ok"), run_config(TARGET, "run-resume"))
        assert noted == Counter({"run-resume": 1})
        assert [e.run_id for e in run(backend, backend.resumptions(TARGET))] == ["run-resume"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_ledger_goes_with_its_thread_copied_and_deleted(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A copy carries the entries, so rolling the resume back restores the copy too; a
    deleted thread leaves none."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        backend = saver._backend
        assert backend is not None
        graph = asking_graph(saver)
        for t in (TARGET, TWIN):
            graph.invoke({"said": []}, run_config(t, "run-0"))
            graph.invoke(Command(resume="one"), run_config(t, "run-1"))
        graph.invoke(Command(resume="two"), run_config(TARGET, "run-resume"))
        saver.copy_thread(TARGET, "copy")
        assert len(run(backend, backend.resumptions("copy"))) == 2
        saver.delete_for_runs(["run-resume"])
        for t in (TARGET, "copy"):
            assert view(graph, saver, t) == view(graph, saver, TWIN)
            assert integrity(inner, t).clean
            assert [e.run_id for e in run(backend, backend.resumptions(t))] == ["run-1"]
        saver.delete_thread(TARGET)
        assert run(backend, backend.resumptions(TARGET)) == []
        assert [e.run_id for e in run(backend, backend.resumptions("copy"))] == ["run-1"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_sweep_deletes_the_ledger_with_its_thread(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = set_clock(monkeypatch)
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        backend = saver._backend
        assert backend is not None
        graph = asking_graph(saver)
        for run_id, given in (
            ("run-0", {"said": []}),
            ("run-1", Command(resume="one")),
            ("run-resume", Command(resume="two")),
        ):
            graph.invoke(given, run_config(TARGET, run_id))
        assert len(run(backend, backend.resumptions(TARGET))) == 2
        clock.advance(IDLE_FOR * 2)
        done = RetentionSweeper(saver, IdleThreadPolicy(IDLE_FOR, "delete"), clock=clock).run_pass()
        assert [r.outcome for r in done.results] == [SweepOutcome.DELETED]
        assert run(backend, backend.resumptions(TARGET)) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_ledger_that_cannot_be_written_is_said_once(
    kind: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ledger no write reaches (a role without INSERT on it) fails every resume alike:
    the runs go on, and it is said once, not once a resume."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        backend = saver._backend
        assert backend is not None
        refused: list[str] = []

        def refusing(thread_id: str, ns: str, checkpoint_id: str, run_id: str) -> Any:
            refused.append(run_id)
            raise PermissionError("permission denied for table retaining_saver_resumed")

        monkeypatch.setattr(backend, "note_resume", refusing)
        graph = asking_graph(saver)
        with caplog.at_level("DEBUG", logger="retaining_saver"):
            for t in (TARGET, TWIN):
                graph.invoke({"said": []}, run_config(t, "run-0"))
                graph.invoke(Command(resume="one"), run_config(t, "run-1"))
                graph.invoke(Command(resume="two"), run_config(t, "run-2"))
        assert refused == ["run-1", "run-2"] * 2
        said = [r for r in caplog.records if "could not record the resume" in r.getMessage()]
        assert [r.levelname for r in said] == ["WARNING"] + ["DEBUG"] * 3
        assert graph.get_state(thread(TARGET)).values == {"said": ["one two"]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_resume_not_recorded_at_its_first_write_is_not_recorded_later(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry must hold the rows as they were before the run's first write there: one
    taken at a later write would hold the run's own answer, and rolling the run back
    would restore it. A ledger write that failed once (a dropped connection) is not
    tried again for that run; its rollback reads the store, as one the ledger never saw."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        backend = saver._backend
        assert backend is not None
        note = backend.note_resume
        tried: list[str] = []

        def failing_once(thread_id: str, ns: str, checkpoint_id: str, run_id: str) -> Any:
            tried.append(run_id)
            if len(tried) == 1:
                raise ConnectionError("server closed the connection unexpectedly")
            return note(thread_id, ns, checkpoint_id, run_id)

        graph = asking_graph(saver)
        graph.invoke({"said": []}, run_config(TARGET, "run-0"))
        monkeypatch.setattr(backend, "note_resume", failing_once)
        graph.invoke(Command(resume="one"), run_config(TARGET, "run-1"))
        graph.invoke(Command(resume="two"), run_config(TARGET, "run-2"))
        assert tried == ["run-1", "run-2"]
        assert [e.run_id for e in run(backend, backend.resumptions(TARGET))] == ["run-2"]
