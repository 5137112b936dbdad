"""With cleanup out of the picture, `RetainingSaver` is transparent.

Every public `BaseCheckpointSaver` method goes to the inner saver with the same
arguments and hands back exactly what the inner saver returned; a method the
inner saver lacks fails as it fails on the bare saver; construction checks its
arguments; backend extras and the serializer are the inner saver's own.

`RecordingSaver` (an `InMemorySaver` subclass, hence an unsupported saver with
cleanup disabled) logs every call it receives.
"""

from __future__ import annotations

import inspect
import sqlite3
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiosqlite
import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from retaining_saver import RetainingSaver, UnsupportedSaverError

THREAD = "thread-1"
UNSUPPORTED = r".*not a supported saver"
VERSION = "00000000000000000000000000000002.0.5"  # InMemorySaver/SqliteSaver format

# Recording saver


@dataclass
class Call:
    """One call the inner saver received: bound arguments and what it returned."""

    name: str
    arguments: dict[str, Any]
    result: Any


def bind(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`args`/`kwargs` bound to the parameters of `InMemorySaver.<name>`, defaults applied."""
    bound = inspect.signature(getattr(InMemorySaver, name)).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return {key: value for key, value in bound.arguments.items() if key != "self"}


def _recording(name: str) -> Callable[..., Any]:
    """A method that calls InMemorySaver's `name` and logs it; a sentinel if it is missing."""
    implementation = getattr(InMemorySaver, name)

    def method(self: RecordingSaver, *args: Any, **kwargs: Any) -> Any:
        try:
            result = implementation(self, *args, **kwargs)
        except NotImplementedError:
            result = object()
        self.calls.append(Call(name, bind(name, args, kwargs), result))
        return result

    return method


def _recording_async(name: str) -> Callable[..., Any]:
    """The async twin of `_recording`."""
    implementation = getattr(InMemorySaver, name)

    async def method(self: RecordingSaver, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await implementation(self, *args, **kwargs)
        except NotImplementedError:
            result = object()
        self.calls.append(Call(name, bind(name, args, kwargs), result))
        return result

    return method


class RecordingSaver(InMemorySaver):
    """An InMemorySaver that logs each public call it receives."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[Call] = []
        self.specs: list[Any] = ["spec-sentinel"]

    @property
    def config_specs(self) -> list[Any]:
        return self.specs

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[Any]:
        call = Call("list", bind("list", (config,), kwargs), [])
        self.calls.append(call)
        for item in super().list(config, **kwargs):
            call.result.append(item)
            yield item

    async def alist(self, config: RunnableConfig | None, **kwargs: Any) -> AsyncIterator[Any]:
        call = Call("alist", bind("alist", (config,), kwargs), [])
        self.calls.append(call)
        async for item in super().alist(config, **kwargs):
            call.result.append(item)
            yield item

    def only_call(self, name: str) -> Call:
        """The single logged call to `name`."""
        calls = [call for call in self.calls if call.name == name]
        assert len(calls) == 1, f"inner.{name} called {len(calls)} times"
        return calls[0]


SYNC_METHODS = (
    "get_tuple",
    "put",
    "put_writes",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
    "get_delta_channel_history",
    "get_next_version",
    "with_allowlist",
)
# Every sync method but get_next_version and with_allowlist has an async twin.
ASYNC_METHODS = tuple(f"a{name}" for name in SYNC_METHODS[:-2])
for _name in SYNC_METHODS:
    setattr(RecordingSaver, _name, _recording(_name))
for _name in ASYNC_METHODS:
    setattr(RecordingSaver, _name, _recording_async(_name))


def wrap_quietly(inner: BaseCheckpointSaver[Any]) -> RetainingSaver:
    """`RetainingSaver(inner)` without the unsupported-saver warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNSUPPORTED)
        return RetainingSaver(inner)


# Stored data


def thread_config(thread_id: str = THREAD) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def new_checkpoint(text: str) -> Checkpoint:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [text]}
    checkpoint["channel_versions"] = {"messages": text}
    return checkpoint


def store_history(saver: BaseCheckpointSaver[Any]) -> RunnableConfig:
    """Two checkpoints on THREAD, writes on the first; returns the second's config."""
    first = saver.put(thread_config(), new_checkpoint("v1"), {"source": "input", "step": -1}, {})
    saver.put_writes(first, [("messages", "w1")], "task-0")
    second = new_checkpoint("v2")
    return saver.put(first, second, {"source": "loop", "step": 0}, {"messages": "v2"})


def case_arguments(name: str, stored: RunnableConfig) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments, none left at its default, for calling `name` (or its `a` twin)."""
    table: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
        "get_tuple": ((stored,), {}),
        "list": ((thread_config(),), {"filter": {"source": "input"}, "before": stored, "limit": 5}),
        "put": (
            (stored, new_checkpoint("v3"), {"source": "loop", "step": 1}, {"messages": "v3"}),
            {},
        ),
        "put_writes": ((stored, [("messages", "w2")], "task-1", "path-1"), {}),
        "delete_thread": ((THREAD,), {}),
        "delete_for_runs": ((["run-1"],), {}),
        "copy_thread": ((THREAD, "thread-2"), {}),
        "prune": (([THREAD],), {"strategy": "delete"}),
        "get_delta_channel_history": ((), {"config": stored, "channels": ["messages"]}),
        "get_next_version": ((VERSION, None), {}),
    }
    return table[name] if name in table else table[name.removeprefix("a")]


@pytest.fixture
def recorder() -> tuple[RecordingSaver, RunnableConfig]:
    """A RecordingSaver holding two checkpoints, its log emptied."""
    saver = RecordingSaver()
    stored = store_history(saver)
    saver.calls.clear()
    return saver, stored


def assert_same_result(result: Any, expected: Any) -> None:
    if isinstance(expected, list):
        assert len(result) == len(expected) > 0
        assert all(got is want for got, want in zip(result, expected, strict=True))
    else:
        assert result is expected


# Every method reaches inner


@pytest.mark.parametrize("name", [*SYNC_METHODS[:-1], "list"])
def test_sync_method_goes_to_inner(name: str, recorder: tuple[RecordingSaver, Any]) -> None:
    inner, stored = recorder
    args, kwargs = case_arguments(name, stored)
    result = getattr(wrap_quietly(inner), name)(*args, **kwargs)
    if name == "list":
        result = list(result)
    call = inner.only_call(name)
    assert call.arguments == bind(name, args, kwargs)
    assert_same_result(result, call.result)


@pytest.mark.parametrize("name", [*ASYNC_METHODS, "alist"])
async def test_async_method_goes_to_inner(name: str, recorder: tuple[RecordingSaver, Any]) -> None:
    inner, stored = recorder
    args, kwargs = case_arguments(name, stored)
    if name == "alist":
        result: Any = [item async for item in wrap_quietly(inner).alist(*args, **kwargs)]
    else:
        result = await getattr(wrap_quietly(inner), name)(*args, **kwargs)
    call = inner.only_call(name)
    assert call.arguments == bind(name, args, kwargs)
    assert_same_result(result, call.result)


def test_get_reads_through_inner_get_tuple(recorder: tuple[RecordingSaver, Any]) -> None:
    inner, stored = recorder
    wrapped = wrap_quietly(inner)
    checkpoint = wrapped.get(stored)
    assert checkpoint is inner.only_call("get_tuple").result.checkpoint
    assert checkpoint == inner.get(stored)
    assert wrapped.get(thread_config("no-such-thread")) is None


async def test_aget_reads_through_inner_aget_tuple(recorder: tuple[RecordingSaver, Any]) -> None:
    inner, stored = recorder
    wrapped = wrap_quietly(inner)
    checkpoint = await wrapped.aget(stored)
    assert checkpoint is inner.only_call("aget_tuple").result.checkpoint
    assert checkpoint == await inner.aget(stored)
    assert await wrapped.aget(thread_config("no-such-thread")) is None


def test_config_specs_are_inner_config_specs() -> None:
    inner = RecordingSaver()
    assert wrap_quietly(inner).config_specs is inner.specs


def test_serde_is_inner_serde() -> None:
    inner = InMemorySaver()
    wrapped = RetainingSaver(inner)
    assert wrapped.serde is inner.serde
    replacement = JsonPlusSerializer()
    wrapped.serde = replacement
    assert inner.serde is replacement


def test_with_allowlist_wraps_inner_clone() -> None:
    inner = RecordingSaver(serde=JsonPlusSerializer(allowed_msgpack_modules=None))
    wrapped = wrap_quietly(inner)
    clone = wrapped.with_allowlist([("my.module", "MyType")])
    inner_clone = inner.only_call("with_allowlist").result
    assert inner_clone is not inner
    assert clone is not wrapped
    assert type(clone) is type(wrapped)
    assert clone.inner is inner_clone
    assert clone.serde is inner_clone.serde is not inner.serde
    assert wrapped.inner is inner


def test_with_allowlist_returns_self_when_inner_does() -> None:
    inner = RecordingSaver()
    wrapped = wrap_quietly(inner)
    assert wrapped.with_allowlist([]) is wrapped
    assert inner.only_call("with_allowlist").result is inner


# Methods the inner saver lacks

MEMORY_LACKS = ["delete_for_runs", "copy_thread", "prune"]
SQLITE_LACKS = [
    *MEMORY_LACKS,
    "aget_tuple",
    "alist",
    "aput",
    "aput_writes",
    "adelete_thread",
    "aget_delta_channel_history",
]


async def failure_of(saver: Any, name: str, stored: RunnableConfig) -> tuple[type, str]:
    """The exception type and message of calling `saver.<name>` (and consuming its result)."""
    args, kwargs = case_arguments(name, stored)
    try:
        result = getattr(saver, name)(*args, **kwargs)
        if inspect.isasyncgen(result):
            _ = [item async for item in result]
        elif inspect.isawaitable(result):
            await result
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError(f"{type(saver).__name__}.{name} did not fail")


@pytest.mark.parametrize("name", MEMORY_LACKS + [f"a{name}" for name in MEMORY_LACKS])
async def test_memory_missing_method_fails_like_inner(name: str) -> None:
    inner = InMemorySaver()
    stored = store_history(inner)
    failure = await failure_of(inner, name, stored)
    assert failure[0] is NotImplementedError
    assert await failure_of(RetainingSaver(inner), name, stored) == failure


@pytest.mark.parametrize("name", SQLITE_LACKS + [f"a{name}" for name in MEMORY_LACKS])
async def test_sqlite_missing_method_fails_like_inner(name: str, sqlite_path: str) -> None:
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        stored = store_history(inner)
        failure = await failure_of(inner, name, stored)
        assert failure[0] is NotImplementedError
        assert await failure_of(RetainingSaver(inner), name, stored) == failure


# Sync path on a real SQLite file


def test_sqlite_sync_path_round_trips(sqlite_path: str) -> None:
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        wrapped = RetainingSaver(inner)
        stored = store_history(wrapped)
        assert wrapped.get_tuple(stored) == inner.get_tuple(stored) is not None
        assert wrapped.get(stored) == inner.get(stored)
        assert list(wrapped.list(thread_config())) == list(inner.list(thread_config()))
        history = {"config": stored, "channels": ["messages"]}
        assert wrapped.get_delta_channel_history(**history) == inner.get_delta_channel_history(
            **history
        )
        assert wrapped.get_next_version(VERSION, None) != VERSION
        with sqlite3.connect(sqlite_path) as conn:
            (rows,) = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        assert rows >= 1
        wrapped.delete_thread(THREAD)
        assert inner.get_tuple(thread_config()) is None


# Context-manager use


def test_with_enters_and_exits_inner() -> None:
    inner = InMemorySaver()
    events: list[str] = []
    inner.stack.callback(events.append, "exited")
    with RetainingSaver(inner) as saver:
        assert isinstance(saver, RetainingSaver)
        assert saver.inner is inner
        assert events == []
    assert events == ["exited"]


async def test_async_with_enters_and_exits_inner() -> None:
    inner = InMemorySaver()
    events: list[str] = []
    inner.stack.callback(events.append, "exited")
    async with RetainingSaver(inner) as saver:
        assert saver.inner is inner
        assert events == []
    assert events == ["exited"]


def test_with_propagates_exceptions() -> None:
    with pytest.raises(ValueError, match="boom"), RetainingSaver(InMemorySaver()):
        raise ValueError("boom")


def _suppress(*exc_info: object) -> bool:
    return True


def test_bare_saver_can_suppress_exceptions() -> None:
    bare = InMemorySaver()
    bare.stack.push(_suppress)
    with bare:
        raise ValueError("suppressed by the bare saver's exit stack")


def test_with_suppresses_when_inner_does() -> None:
    inner = InMemorySaver()
    inner.stack.push(_suppress)
    with RetainingSaver(inner):
        raise KeyError("the inner saver's exit stack suppresses this")


def test_with_on_sqlite_saver(sqlite_path: str) -> None:
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        with RetainingSaver(inner) as saver:
            stored = store_history(saver)
        assert inner.get_tuple(stored) is not None


async def test_async_with_on_async_sqlite_saver(sqlite_path: str) -> None:
    async with AsyncSqliteSaver.from_conn_string(sqlite_path) as inner:
        async with RetainingSaver(inner) as saver:
            assert saver.inner is inner
            stored = await saver.aput(
                thread_config(), new_checkpoint("v1"), {"source": "input", "step": -1}, {}
            )
        assert await inner.aget_tuple(stored) is not None


# Construction


@pytest.mark.parametrize("inner", [object(), None, "saver", InMemorySaver])
def test_non_saver_is_type_error(inner: object) -> None:
    with pytest.raises(TypeError, match=type(inner).__name__):
        RetainingSaver(inner)  # type: ignore[arg-type]


def test_strict_on_unsupported_saver_raises() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(UnsupportedSaverError, match="RecordingSaver") as raised:
            RetainingSaver(RecordingSaver(), strict=True)
    assert raised.value.saver_type is RecordingSaver
    assert caught == []


def test_default_on_unsupported_saver_warns_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = RetainingSaver(RecordingSaver())
    assert len(caught) == 1
    assert "RecordingSaver" in str(caught[0].message)
    assert caught[0].filename == __file__
    assert wrapped.cleanup_enabled is False


@pytest.mark.parametrize("strict", [False, True])
def test_supported_saver_is_quiet_and_enabled(strict: bool, sqlite_path: str) -> None:
    with SqliteSaver.from_conn_string(sqlite_path) as sqlite_saver:
        for inner in (InMemorySaver(), sqlite_saver):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                wrapped = RetainingSaver(inner, strict=strict)
            assert caught == []
            assert wrapped.cleanup_enabled is True


@pytest.mark.parametrize("strict", ["yes", 1, None])
def test_strict_must_be_bool(strict: object) -> None:
    with pytest.raises(TypeError, match="strict") as raised:
        RetainingSaver(InMemorySaver(), strict=strict)  # type: ignore[arg-type]
    assert not isinstance(raised.value, UnsupportedSaverError)


# Backend extras, serializer, capability detection


def test_backend_extras_are_reachable(sqlite_path: str) -> None:
    inner = SqliteSaver(sqlite3.connect(sqlite_path, check_same_thread=False))
    wrapped = RetainingSaver(inner)
    assert wrapped.conn is inner.conn
    assert wrapped.setup == inner.setup
    assert inner.is_setup is False
    wrapped.setup()
    assert inner.is_setup is True
    assert wrapped.is_setup is True
    with pytest.raises(AttributeError, match="no_such_attribute"):
        _ = wrapped.no_such_attribute
    inner.conn.close()


OpenSaver = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Any]]


@asynccontextmanager
async def open_memory(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    yield InMemorySaver()


@asynccontextmanager
async def open_sqlite(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    conn = sqlite3.connect(request.getfixturevalue("sqlite_path"), check_same_thread=False)
    yield SqliteSaver(conn)
    conn.close()


@asynccontextmanager
async def open_async_sqlite(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    async with aiosqlite.connect(request.getfixturevalue("sqlite_path")) as conn:
        yield AsyncSqliteSaver(conn)


@asynccontextmanager
async def open_postgres(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    with psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True) as conn:
        yield PostgresSaver(conn)


@asynccontextmanager
async def open_async_postgres(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    dsn = request.getfixturevalue("pg_dsn")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        yield AsyncPostgresSaver(conn)


SUPPORTED: dict[str, OpenSaver] = {
    "InMemorySaver": open_memory,
    "SqliteSaver": open_sqlite,
    "AsyncSqliteSaver": open_async_sqlite,
    "PostgresSaver": open_postgres,
    "AsyncPostgresSaver": open_async_postgres,
}


@pytest.mark.parametrize("saver_name", list(SUPPORTED))
async def test_serde_and_capabilities_match_inner(
    saver_name: str, request: pytest.FixtureRequest
) -> None:
    async with SUPPORTED[saver_name](request) as inner:
        assert type(inner).__name__ == saver_name
        wrapped = RetainingSaver(inner, strict=True)
        assert wrapped.serde is inner.serde
        expected = DetectedCapabilities.from_instance(inner)
        assert DetectedCapabilities.from_instance(wrapped) == expected
