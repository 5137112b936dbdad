"""`RetainingSaver` as the custom checkpointer of LangGraph's real Agent Server.

Each scenario starts a fresh `langgraph dev` (from `langgraph-cli[inmem]`) as a
subprocess, on a port chosen free and read back from its log, with a
`langgraph.json` whose checkpointer is the example's factory
(examples/agent_server/saver.py) over SQLite or Postgres, its whole-thread and
whole-run calls recorded (recording_saver.py). The test speaks to it through
`langgraph_sdk` on 127.0.0.1 only, checks what the server answers and what the
store holds (read with a saver of its own), and stops the server by its process id.
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from savers import open_async_at

from retaining_saver import RetainingSaver
from retaining_saver.testing import awrite_duration_leaf
from retaining_saver.testing.checks import aintegrity

pytest.importorskip("langgraph_api", reason="needs langgraph-cli[inmem] (the dev extra)")
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "agent_server"
LANGGRAPH = Path(sys.executable).with_name("langgraph")
STARTUP_SECONDS = 90.0
RUN_SECONDS = 60.0
API_LINE = re.compile(r"API: \S*?http://127\.0\.0\.1:(\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ASSISTANT = "chat"


@dataclass
class Server:
    """A running `langgraph dev`: its URL, the store it writes, the calls it made."""

    url: str
    kind: str
    target: str
    calls_path: Path
    log_path: Path

    def calls(self) -> list[dict[str, Any]]:
        if not self.calls_path.exists():
            return []
        return [json.loads(line) for line in self.calls_path.read_text().splitlines()]

    @asynccontextmanager
    async def store(self) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        """A saver of the test's own over the server's store."""
        async with open_async_at(self.kind, self.target) as inner:
            yield inner


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(workdir: Path) -> Path:
    config = {
        "dependencies": [str(EXAMPLE)],
        "graphs": {ASSISTANT: str(EXAMPLE / "graph.py") + ":graph"},
        "checkpointer": {"path": str(HERE / "recording_saver.py") + ":make_saver"},
    }
    path = workdir / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


def _api_port(log_path: Path, process: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        text = ANSI.sub("", log_path.read_text(errors="replace"))
        found = API_LINE.search(text)
        if found and "Application started up" in text:
            return int(found.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"langgraph dev did not start:\n{log_path.read_text()[-4000:]}")


@contextmanager
def agent_server(
    kind: str, target: str, workdir: Path, *, subclass: bool = False
) -> Iterator[Server]:
    """A fresh `langgraph dev` over the store `target`, stopped by its pid on exit."""
    log_path, calls_path = workdir / "server.log", workdir / "calls.jsonl"
    env = {
        **os.environ,
        "RETAINING_SAVER_POSTGRES" if kind == "postgres" else "RETAINING_SAVER_SQLITE": target,
        "RETAINING_SAVER_CALL_LOG": str(calls_path),
        "RETAINING_SAVER_SUBCLASS": "1" if subclass else "0",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
        "--port", str(free_port()), "--config", str(_config(workdir)),
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        port = _api_port(log_path, process)
        yield Server(f"http://127.0.0.1:{port}", kind, target, calls_path, log_path)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # its own session: the server and its reloader
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=20)


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "postgres":
        return "postgres", str(request.getfixturevalue("pg_dsn"))
    return "sqlite", str(tmp_path / "checkpoints.sqlite")


@asynccontextmanager
async def thread_on_server(
    store_target: tuple[str, str], workdir: Path, *, subclass: bool = False
) -> AsyncIterator[tuple[Server, Any, str]]:
    """A fresh server over the store, its client, and a thread that ran one turn ("a")."""
    with agent_server(*store_target, workdir, subclass=subclass) as server:
        client = get_client(url=server.url)
        thread_id = (await client.threads.create())["thread_id"]
        await run(client, thread_id, "a")
        yield server, client, thread_id


def said(state: Any) -> list[str]:
    return list(state["values"].get("said", []))


async def run(client: Any, thread_id: str, text: str, **kwargs: Any) -> Any:
    return await asyncio.wait_for(
        client.runs.wait(thread_id, ASSISTANT, input={"said": [text]}, **kwargs), RUN_SECONDS
    )


async def run_ids_in(server: Server, thread_id: str) -> list[Any]:
    async with server.store() as inner:
        return [t.metadata.get("run_id") async for t in inner.alist(thread_of(thread_id))]


def thread_of(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


async def assert_clean(server: Server, thread_id: str) -> None:
    async with server.store() as inner:
        assert (await aintegrity(inner, thread_id)).clean


def report(server: Server, scenario: str) -> None:
    """Print what the server called, for the test log."""
    print(f"\n[{server.kind}] {scenario}:")
    for call in server.calls():
        print(f"  {call['call']}({call['args']}, {call['kwargs']}) -> {call['answer']}")


async def test_runs_history_and_delete_thread(
    store_target: tuple[str, str], tmp_path: Path
) -> None:
    async with thread_on_server(store_target, tmp_path) as (server, client, thread_id):
        await run(client, thread_id, "b")
        state = await client.threads.get_state(thread_id)
        assert said(state) == ["a", "echo a", "b", "echo b"]
        history = await client.threads.get_history(thread_id, limit=100)
        assert len(history) >= 6
        await assert_clean(server, thread_id)
        assert len(await run_ids_in(server, thread_id)) == len(history)
        await client.threads.delete(thread_id)
        assert await run_ids_in(server, thread_id) == []
        report(server, "runs, history, DELETE thread")
        assert [c["call"] for c in server.calls()] == ["adelete_thread"]
        assert server.calls()[0]["answer"] == "returned"


async def test_delete_run(store_target: tuple[str, str], tmp_path: Path) -> None:
    async with thread_on_server(store_target, tmp_path) as (server, client, thread_id):
        before = said(await client.threads.get_state(thread_id))
        second = await client.runs.create(thread_id, ASSISTANT, input={"said": ["b"]})
        await asyncio.wait_for(client.runs.join(thread_id, second["run_id"]), RUN_SECONDS)
        assert second["run_id"] in await run_ids_in(server, thread_id)
        await client.runs.delete(thread_id, second["run_id"])
        with pytest.raises(NotFoundError):
            await client.runs.get(thread_id, second["run_id"])
        assert second["run_id"] not in await run_ids_in(server, thread_id)
        assert said(await client.threads.get_state(thread_id)) == before
        await assert_clean(server, thread_id)
        await run(client, thread_id, "c")  # the thread goes on from before the deleted run
        assert said(await client.threads.get_state(thread_id)) == [*before, "c", "echo c"]
        report(server, "DELETE run")
        calls = [c for c in server.calls() if c["call"] == "adelete_for_runs"]
        assert calls and all(c["answer"] == "returned" for c in calls)
        assert calls[0]["args"] == [[second["run_id"]]]


async def test_rollback(store_target: tuple[str, str], tmp_path: Path) -> None:
    async with thread_on_server(store_target, tmp_path) as (server, client, thread_id):
        slow = await client.runs.create(thread_id, ASSISTANT, input={"said": ["slow b"]})
        deadline = time.monotonic() + RUN_SECONDS
        while slow["run_id"] not in await run_ids_in(server, thread_id):
            assert time.monotonic() < deadline, "the slow run never wrote a checkpoint"
            await asyncio.sleep(0.1)
        await run(client, thread_id, "c", multitask_strategy="rollback")
        with pytest.raises(NotFoundError):
            await client.runs.get(thread_id, slow["run_id"])
        assert slow["run_id"] not in await run_ids_in(server, thread_id)
        state = await client.threads.get_state(thread_id)
        assert said(state) == ["a", "echo a", "c", "echo c"]
        await assert_clean(server, thread_id)
        report(server, 'multitask_strategy="rollback"')
        calls = [c for c in server.calls() if c["call"] == "adelete_for_runs"]
        assert calls and all(c["answer"] == "returned" for c in calls)
        assert all(c["args"] == [[slow["run_id"]]] for c in calls)


async def test_copy_thread(store_target: tuple[str, str], tmp_path: Path) -> None:
    async with thread_on_server(store_target, tmp_path) as (server, client, thread_id):
        await run(client, thread_id, "b")
        copy_id = (await client.threads.copy(thread_id))["thread_id"]
        states = [await client.threads.get_state(t) for t in (thread_id, copy_id)]
        assert said(states[0]) == said(states[1]) == ["a", "echo a", "b", "echo b"]
        assert states[0]["checkpoint"]["checkpoint_id"] == states[1]["checkpoint"]["checkpoint_id"]
        histories = [await client.threads.get_history(t, limit=100) for t in (thread_id, copy_id)]
        assert [h["values"] for h in histories[0]] == [h["values"] for h in histories[1]]
        await assert_clean(server, copy_id)
        await run(client, copy_id, "c")
        assert said(await client.threads.get_state(copy_id))[-2:] == ["c", "echo c"]
        assert said(await client.threads.get_state(thread_id)) == said(states[0])
        report(server, "thread copy")
        calls = [c for c in server.calls() if c["call"] == "acopy_thread"]
        assert [c["args"] for c in calls] == [[thread_id, copy_id]]
        assert calls[0]["answer"] == "returned"


async def test_a_subclassed_inner_saver_keeps_cleanup(
    store_target: tuple[str, str], tmp_path: Path
) -> None:
    """The app's saver subclasses the stock one to add a method; a duration stamp written
    between two runs is reclaimed when the server's next run starts, and run deletion
    works."""
    async with thread_on_server(store_target, tmp_path, subclass=True) as (
        server,
        client,
        thread_id,
    ):
        assert "AppSaver" not in server.log_path.read_text()  # no pass-through warning
        async with server.store() as inner:
            stamp = await awrite_duration_leaf(RetainingSaver(inner), thread_id)
        assert stamp is not None
        second = await client.runs.create(thread_id, ASSISTANT, input={"said": ["b"]})
        await asyncio.wait_for(client.runs.join(thread_id, second["run_id"]), RUN_SECONDS)
        async with server.store() as inner:
            ids = [t.checkpoint["id"] async for t in inner.alist(thread_of(thread_id))]
        assert stamp not in ids, "the server's run did not reclaim the stamp"
        await client.runs.delete(thread_id, second["run_id"])
        assert said(await client.threads.get_state(thread_id)) == ["a", "echo a"]
        await assert_clean(server, thread_id)
        report(server, "subclassed inner saver")
        assert [c["answer"] for c in server.calls() if c["call"] == "adelete_for_runs"]


def waiting(state: Any) -> Any:
    """What a client sees of an interrupted thread: values, next nodes, interrupts."""
    interrupts = [i["value"] for t in state["tasks"] for i in t.get("interrupts", [])]
    return state["values"], state["next"], interrupts


async def test_delete_a_resume_run(store_target: tuple[str, str], tmp_path: Path) -> None:
    """`DELETE /threads/{id}/runs/{run_id}` of the run that answered an interrupt: the
    thread waits on the same interrupt again, and takes another answer."""
    async with thread_on_server(store_target, tmp_path) as (server, client, thread_id):
        await run(client, thread_id, "ask b")
        before = waiting(await client.threads.get_state(thread_id))
        assert before[1] == ["review"] and before[2] == ["review the reply"]
        resume = await client.runs.create(thread_id, ASSISTANT, command={"resume": "yes"})
        await asyncio.wait_for(client.runs.join(thread_id, resume["run_id"]), RUN_SECONDS)
        assert said(await client.threads.get_state(thread_id))[-1] == "human yes"
        await client.runs.delete(thread_id, resume["run_id"])
        assert resume["run_id"] not in await run_ids_in(server, thread_id)
        assert waiting(await client.threads.get_state(thread_id)) == before
        await assert_clean(server, thread_id)
        later = await client.runs.create(thread_id, ASSISTANT, command={"resume": "later"})
        await asyncio.wait_for(client.runs.join(thread_id, later["run_id"]), RUN_SECONDS)
        state = await client.threads.get_state(thread_id)
        assert said(state) == [*before[0]["said"], "human later"] and state["next"] == []
        report(server, "DELETE a resume run")
        calls = [c for c in server.calls() if c["call"] == "adelete_for_runs"]
        assert calls and all(c["answer"] == "returned" for c in calls)
