"""With cleanup out of the picture, `RetainingSaver` is transparent.

Every public `BaseCheckpointSaver` method goes to the inner saver with the same
arguments and hands back exactly what the inner saver returned; a method the
inner saver lacks fails as it fails on the bare saver; construction checks its
arguments; backend extras and the serializer are the inner saver's own.

`RecordingSaver` (an `InMemorySaver` subclass, hence an unsupported saver with
cleanup disabled) logs every call it receives. The savers of `forwarding.py`
answer calls their type does not define; wrapped, each answers every public
method of the installed `BaseCheckpointSaver` as it does bare. The wrapper's
surface is checked against that class, so a method LangGraph adds fails here
until it is forwarded (or reviewed into `NOT_DEFINED_BY_WRAPPER`).
"""

from __future__ import annotations

import ast
import inspect
import sqlite3
import textwrap
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from forwarding import KINDS, own_calls
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.conformance.capabilities import Capability, DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from savers import open_async, open_sync

from retaining_saver import RetainingSaver, UnsupportedSaverError
from retaining_saver._delegate import MIRRORED_METHODS, DelegatingSaver

THREAD = "thread-1"
# What RetainingSaver implements itself over supported savers.
PROVIDED = (
    "prune",
    "aprune",
    "delete_for_runs",
    "adelete_for_runs",
    "copy_thread",
    "acopy_thread",
)
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


# The same two checkpoints, ids included, for savers whose answers are compared.
FIXED_HISTORY = (new_checkpoint("v1"), new_checkpoint("v2"))


def store_history(
    saver: BaseCheckpointSaver[Any], history: tuple[Checkpoint, Checkpoint] | None = None
) -> RunnableConfig:
    """Two checkpoints on THREAD, writes on the first; returns the second's config.

    Args:
        saver: The saver to store them in.
        history: The two checkpoints; two new ones if None.

    Returns:
        The config of the second checkpoint.
    """
    first_checkpoint, second = history or (new_checkpoint("v1"), new_checkpoint("v2"))
    first = saver.put(thread_config(), first_checkpoint, {"source": "input", "step": -1}, {})
    saver.put_writes(first, [("messages", "w1")], "task-0")
    return saver.put(first, second, {"source": "loop", "step": 0}, {"messages": "v2"})


def case_arguments(name: str, stored: RunnableConfig) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments, none left at its default, for calling `name` (or its `a` twin)."""
    table: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
        "get": ((stored,), {}),
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
        "with_allowlist": (([("my.module", "MyType")],), {}),
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

# `prune`, `delete_for_runs` and `copy_thread` too, which the wrapper provides over every
# supported saver (tests/engine/test_prune.py, tests/engine/test_thread_ops.py); over a saver
# it does not support, they fail as the saver's own.
MEMORY_LACKS = ["delete_for_runs", "copy_thread"]
SQLITE_LACKS = [
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


class _ReadingItsOwnWay(InMemorySaver):
    """A subclass that changes how it reads the store: not supported, passed through."""

    def get_tuple(self, config: RunnableConfig) -> Any:
        return super().get_tuple(config)


@pytest.mark.parametrize("name", MEMORY_LACKS + [f"a{name}" for name in MEMORY_LACKS])
async def test_unsupported_missing_method_fails_like_inner(name: str) -> None:
    inner = _ReadingItsOwnWay()
    stored = store_history(inner)
    failure = await failure_of(inner, name, stored)
    assert failure[0] is NotImplementedError
    assert await failure_of(wrap_quietly(inner), name, stored) == failure


@pytest.mark.parametrize("name", SQLITE_LACKS)
async def test_sqlite_missing_method_fails_like_inner(
    name: str, request: pytest.FixtureRequest
) -> None:
    with open_sync("sqlite", request) as inner:
        stored = store_history(inner)
        failure = await failure_of(inner, name, stored)
        assert failure[0] is NotImplementedError
        assert await failure_of(RetainingSaver(inner), name, stored) == failure


# Sync path on a real SQLite file


def test_sqlite_sync_path_round_trips(sqlite_path: str, request: pytest.FixtureRequest) -> None:
    with open_sync("sqlite", request) as inner:
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


def test_with_on_sqlite_saver(request: pytest.FixtureRequest) -> None:
    with open_sync("sqlite", request) as inner:
        with RetainingSaver(inner) as saver:
            stored = store_history(saver)
        assert inner.get_tuple(stored) is not None


async def test_async_with_on_async_sqlite_saver(request: pytest.FixtureRequest) -> None:
    async with open_async("sqlite", request) as inner:
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
def test_supported_saver_is_quiet_and_enabled(strict: bool, request: pytest.FixtureRequest) -> None:
    with open_sync("sqlite", request) as sqlite_saver:
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


def test_backend_extras_are_reachable(request: pytest.FixtureRequest) -> None:
    with open_sync("sqlite", request) as inner:
        wrapped = RetainingSaver(inner)
        assert wrapped.conn is inner.conn  # type: ignore[attr-defined]
        assert wrapped.setup == inner.setup  # type: ignore[attr-defined]
        assert inner.is_setup is False  # type: ignore[attr-defined]
        wrapped.setup()
        assert inner.is_setup is True  # type: ignore[attr-defined]
        assert wrapped.is_setup is True
        with pytest.raises(AttributeError, match="no_such_attribute"):
            _ = wrapped.no_such_attribute


# Each supported saver type: its kind, and whether it is the async one of that kind.
SUPPORTED: dict[str, tuple[str, bool]] = {
    "InMemorySaver": ("memory", False),
    "SqliteSaver": ("sqlite", False),
    "AsyncSqliteSaver": ("sqlite", True),
    "PostgresSaver": ("postgres", False),
    "AsyncPostgresSaver": ("postgres", True),
}


@asynccontextmanager
async def open_supported(saver_name: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A fresh saver of type `saver_name`, from `savers.py`."""
    kind, is_async = SUPPORTED[saver_name]
    if is_async:
        async with open_async(kind, request) as saver:
            yield saver
    else:
        with open_sync(kind, request) as saver:
            yield saver


@pytest.mark.parametrize("saver_name", list(SUPPORTED))
async def test_serde_and_capabilities_match_inner(
    saver_name: str, request: pytest.FixtureRequest
) -> None:
    async with open_supported(saver_name, request) as inner:
        assert type(inner).__name__ == saver_name
        wrapped = RetainingSaver(inner, strict=True)
        assert wrapped.serde is inner.serde
        expected = DetectedCapabilities.from_instance(inner)
        # The wrapper adds `prune`, `delete_for_runs` and `copy_thread` where the saver
        # lacks them.
        added = {Capability.PRUNE, Capability.DELETE_FOR_RUNS, Capability.COPY_THREAD}
        detected = expected.detected | added
        found = DetectedCapabilities.from_instance(wrapped)
        assert (found.detected, found.missing) == (detected, expected.missing - detected)


# Savers that answer calls their type does not define (see forwarding.py)


def base_methods() -> list[str]:
    """The public methods of the installed `BaseCheckpointSaver`."""
    return sorted(
        name
        for name, value in vars(BaseCheckpointSaver).items()
        if not name.startswith("_") and inspect.isfunction(value)
    )


async def outcome(saver: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What calling `saver.<name>` answers, consumed and made comparable across savers."""
    try:
        result = getattr(saver, name)(*args, **kwargs)
        if inspect.isasyncgen(result):
            result = [item async for item in result]
        elif inspect.isawaitable(result):
            result = await result
        elif isinstance(result, Iterator):
            result = list(result)
    except Exception as exc:
        return "raised", type(exc), str(exc)
    if isinstance(result, BaseCheckpointSaver):
        # with_allowlist: the saver handed back (wrapped or not) is compared by its type.
        return "returned", type(result.inner if isinstance(result, RetainingSaver) else result)
    if name.endswith("get_next_version") and isinstance(result, str):
        return "returned", result.split(".")[0]  # InMemorySaver appends a random fraction
    return "returned", result


def stored_rows(saver: BaseCheckpointSaver[Any]) -> list[Any]:
    """Every checkpoint tuple `saver` holds, to compare what a call left behind."""
    return list(saver.list(None))


@pytest.mark.parametrize("name", base_methods())
@pytest.mark.parametrize("kind", ["memory", *KINDS])
async def test_every_method_answers_like_bare(kind: str, name: str) -> None:
    if kind == "memory" and name in PROVIDED:
        pytest.skip("the wrapper provides it over a supported saver: tests/engine/")
    make = KINDS.get(kind, InMemorySaver)
    bare, twin = make(), make()
    stored = store_history(bare, FIXED_HISTORY)
    assert store_history(twin, FIXED_HISTORY) == stored
    args, kwargs = case_arguments(name, stored)
    wrapped = wrap_quietly(twin)
    before = own_calls(bare), own_calls(twin)
    assert before[0] == before[1]
    expected = await outcome(bare, name, args, kwargs)
    assert await outcome(wrapped, name, args, kwargs) == expected
    # The call reached the same method of the same saver, and left the same rows behind.
    assert own_calls(twin) == own_calls(bare)
    assert stored_rows(twin) == stored_rows(bare)


@pytest.mark.parametrize("kind", ["forwarding", "partly-forwarding"])
def test_forwarding_saver_reaches_its_target(kind: str) -> None:
    """Guard for the test above: bare, these savers' calls do work (no vacuous match)."""
    bare = KINDS[kind]()
    stored = store_history(bare)
    assert bare.get_tuple(stored) is not None
    assert len(stored_rows(bare)) == 2
    assert own_calls(bare)[0] >= 1


def test_wrapper_lacks_only_what_the_instance_lacks() -> None:
    """Mirrors are cached by what the inner saver lacks, not by its type."""
    forwarding = wrap_quietly(KINDS["forwarding"]())
    another_type = type("AnotherForwardingSaver", (type(forwarding.inner),), {})
    assert type(forwarding) is type(wrap_quietly(another_type()))
    assert DetectedCapabilities.from_instance(forwarding) == DetectedCapabilities.from_instance(
        InMemorySaver()
    )
    # FallbackSaver's async methods are the base defaults: so are the wrapper's.
    fallback = wrap_quietly(KINDS["fallback"]())
    assert type(fallback).aput is BaseCheckpointSaver.aput
    assert type(fallback).put is not BaseCheckpointSaver.put


class ClonesIntoFallback(InMemorySaver):
    """A saver whose allowlist clone is another kind of saver, one without async methods."""

    def with_allowlist(self, extra_allowlist: Any) -> BaseCheckpointSaver[Any]:
        return KINDS["fallback"]()


async def test_with_allowlist_clone_lacks_what_its_inner_lacks() -> None:
    wrapped = wrap_quietly(ClonesIntoFallback())
    assert type(wrapped).aput is not BaseCheckpointSaver.aput
    clone = wrapped.with_allowlist([("my.module", "MyType")])
    assert type(clone.inner) is KINDS["fallback"]
    assert type(clone).aput is BaseCheckpointSaver.aput
    args, kwargs = case_arguments("aput", thread_config())
    failure = await outcome(clone.inner, "aput", args, kwargs)
    assert failure[:2] == ("raised", NotImplementedError)
    assert await outcome(clone, "aput", args, kwargs) == failure


# The wrapper's surface follows the installed BaseCheckpointSaver

# Public names of BaseCheckpointSaver that DelegatingSaver does not define itself. Each one
# then runs the base class's code on the wrapper instead of going to `inner`: add a name only
# with the reason that is right, and have it reviewed. Empty: every name is forwarded.
NOT_DEFINED_BY_WRAPPER: dict[str, str] = {}

# Sync/async twins whose base defaults work (they are built on other methods), so no saver
# lacks them and the wrapper never mirrors them.
WORKING_DEFAULT_TWINS: dict[tuple[str, str], str] = {
    ("get", "aget"): "reads `get_tuple`/`aget_tuple`; the wrapper reads through its own",
    ("get_delta_channel_history", "aget_delta_channel_history"): "walks `get_tuple`",
}


def base_public_names() -> list[str]:
    """Every public attribute of the installed `BaseCheckpointSaver`: methods, properties, data."""
    return sorted(name for name in dir(BaseCheckpointSaver) if not name.startswith("_"))


def base_twin_pairs() -> set[tuple[str, str]]:
    methods = set(base_methods())
    return {(name, f"a{name}") for name in methods if f"a{name}" in methods}


def is_stub(name: str) -> bool:
    """Whether the base method only raises NotImplementedError (after its docstring)."""
    source = textwrap.dedent(inspect.getsource(getattr(BaseCheckpointSaver, name)))
    (function,) = ast.parse(source).body
    assert isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    first = body[0] if body else None
    return (
        isinstance(first, ast.Raise)
        and isinstance(first.exc, ast.Name)
        and first.exc.id == "NotImplementedError"
    )


def parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """Name, kind and default of each parameter: what a caller can pass."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_every_public_base_name_is_defined_by_the_wrapper() -> None:
    names = base_public_names()
    assert {"get_tuple", "aput", "serde", "config_specs"} <= set(names)
    undefined = [name for name in names if name not in vars(DelegatingSaver)]
    assert undefined == sorted(NOT_DEFINED_BY_WRAPPER), (
        f"BaseCheckpointSaver names DelegatingSaver does not forward: {undefined}"
    )
    assert set(NOT_DEFINED_BY_WRAPPER) <= set(names), "allow-list names the base lacks"


@pytest.mark.parametrize("wrapper", [DelegatingSaver, RetainingSaver])
def test_forwarded_methods_take_the_base_parameters(wrapper: type) -> None:
    # A parameter the base class gains would otherwise be refused, or dropped on the way in.
    for name in base_methods():
        base = parameters(getattr(BaseCheckpointSaver, name))
        own = parameters(getattr(wrapper, name))
        if wrapper is RetainingSaver and name in PROVIDED:
            # Its own `prune` takes the base's, and keyword-only extras with defaults.
            extra = own[len(base) :]
            assert all(
                k is inspect.Parameter.KEYWORD_ONLY and d is not inspect.Parameter.empty
                for _, k, d in extra
            ), name
            own = own[: len(base)]
        assert own == base, name


def test_mirrored_methods_are_the_base_stubs() -> None:
    mirrored = {name for pair in MIRRORED_METHODS for name in pair}
    stubs = {name for name in base_methods() if is_stub(name)}
    assert mirrored == stubs
    assert set(MIRRORED_METHODS) | set(WORKING_DEFAULT_TWINS) == base_twin_pairs()
    assert not set(MIRRORED_METHODS) & set(WORKING_DEFAULT_TWINS)
    assert all(pair == (pair[0], f"a{pair[0]}") for pair in MIRRORED_METHODS)
