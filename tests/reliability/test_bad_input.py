"""Bad input table: every public entry point, fed wrong types and hostile values.

- The library's own entry points (`RetainingSaver(...)` flags, `admit`,
  `enforce_*`, `storage_stats`, `compact_storage`, `RetentionPolicy`,
  `DeltaHistoryCache`) must refuse a wrong input with a `TypeError` or
  `ValueError` whose message names the argument, and delete nothing.
- Hostile but valid strings (quotes, `;`, `%`, placeholders, unicode, NUL,
  100 000 characters) are ids like any other: the library's entry points work
  on threads so named exactly as on a plain one.
- Where the call is a pass-through (`get_tuple`, `list`, `put`, `put_writes`
  and their async twins) the wrapper does exactly what the bare saver does on
  a fresh store of the same kind: same outcome (the same answer's shape, or
  the same exception type), the same rows written, nothing deleted.
- A stamp with a few MB of metadata is stamped, reclaimed and answered as any.

Each test collects every mismatch and reports them all; the number of inputs
tried is printed (`-s`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from savers import KINDS, open_async_at, open_sync_at, store

from retaining_saver import DeltaHistoryCache, RetainingSaver, RetentionPolicy, Skip
from retaining_saver._effects import run
from retaining_saver.backends._base import Mode
from retaining_saver.testing import RUNTIME_KEY, write_duration_leaf
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn

NUL = "a\x00b"
HUGE_ID = "h" * 100_000
HOSTILE = [
    "a'b",
    'a"b',
    "t'); DROP TABLE checkpoints; --",
    "t; DELETE FROM writes",
    "%s",
    "%(thread_id)s",
    "100%",
    "?",
    "$1",
    "\\",
    "a\nb",
    "ünïcødé 日本語 🙂",
    "\u202eevil",
    " ",
    NUL,
    HUGE_ID,
]
WRONG_TYPES: list[Any] = [
    None,
    0,
    1,
    -1,
    True,
    1.5,
    b"t",
    [],
    ["t"],
    {},
    {"t": 1},
    ("t",),
    object(),
]
ARGUMENT_ERRORS = (TypeError, ValueError)


def _r(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def named_error(name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """None if `call(*args, **kwargs)` raised a TypeError/ValueError naming `name`; else
    what went wrong."""
    try:
        result = call(*args, **kwargs)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except ARGUMENT_ERRORS as error:
        if name not in str(error):
            return f"{type(error).__name__} does not name {name!r}: {str(error)[:120]!r}"
        return None
    except Exception as error:
        return f"raised {type(error).__name__} (not TypeError/ValueError): {str(error)[:120]!r}"
    return "accepted"


def report(violations: list[str], tried: int, what: str) -> None:
    print(f"\n{what}: {tried} inputs tried, {len(violations)} mismatches")
    assert not violations, f"{len(violations)} of {tried} inputs:\n" + "\n".join(violations)


# Constructors: backend-independent


NOT_BOOLS: list[Any] = [None, 0, 1, "", "no", b"", [], {}, 1.5]

FLAG_CASES: list[tuple[str, Any]] = [
    *[("strict", v) for v in [*WRONG_TYPES[:4], 1.5, b"t", "", "yes", "False", [], {}]],
    *[(flag, v) for flag in ("retry_unpinned_reads", "strict_pinned_reads") for v in NOT_BOOLS],
    *[("admission", v) for v in [*WRONG_TYPES, "", "AUTO", "auto ", "auto;", "on", NUL]],
    *[
        ("history_caches", v)
        for v in [None, 0, 1, True, 1.5, b"t", "", "cache", ["t"], {"t": 1}, [object()]]
    ],
    *[("history_caches", v) for v in [(None,), object(), DeltaHistoryCache, [DeltaHistoryCache]]],
    *[
        ("protect_checkpoint_ids", v)
        for v in [None, 0, 1, True, 1.5, b"t", "", "abc", [1], [None], [b"x"], {1: 2}]
    ],
    *[("protect_checkpoint_ids", v) for v in [object(), [["a"]], ("a", 2)]],
    *[
        (flag, v)
        for flag in ("is_reclaimable_leaf", "on_reclaim")
        for v in [0, 1, True, 1.5, b"t", "", "f", [], {}, ("t",), object()]
    ],
    *[
        ("reclaimed_id_ttl", v)
        for v in [None, 0, 30, 1.5, True, b"t", "", "30d", [], {}, object(), 30 * 86400]
    ],
    *[("reclaimed_id_ttl", v) for v in [timedelta(0), timedelta(seconds=-1)]],
]

# Odd but valid: accepted, and the wrapper works.
ACCEPTED_FLAGS: list[tuple[str, Any]] = [
    ("protect_checkpoint_ids", HOSTILE),
    ("protect_checkpoint_ids", []),
    ("protect_checkpoint_ids", set()),
    ("protect_checkpoint_ids", (i for i in ["a"])),
    ("history_caches", []),
    ("history_caches", (DeltaHistoryCache(),)),
    ("reclaimed_id_ttl", timedelta(microseconds=1)),
    ("is_reclaimable_leaf", None),
    ("on_reclaim", print),
    *[("admission", a) for a in ("auto", "explicit", "off")],
]


def test_constructor_flags_and_inner() -> None:
    violations: list[str] = []
    tried = 0
    for flag, value in FLAG_CASES:
        tried += 1
        wrong = named_error(flag, RetainingSaver, InMemorySaver(), **{flag: value})
        if wrong:
            violations.append(f"RetainingSaver({flag}={_r(value)}): {wrong}")
    # `inner` is positional-only; its error names the type it must be.
    for value in [*WRONG_TYPES, "", "saver", InMemorySaver, RetainingSaver]:
        tried += 1
        wrong = named_error("BaseCheckpointSaver", RetainingSaver, value)
        if wrong:
            violations.append(f"RetainingSaver({_r(value)}): {wrong}")
    for flag, value in ACCEPTED_FLAGS:
        tried += 1
        try:
            saver = RetainingSaver(InMemorySaver(), **{flag: value})
            chat_graph(saver).invoke(turn(0), thread("ok"))
        except Exception as error:
            violations.append(f"RetainingSaver({flag}={_r(value)}) refused: {error!r}")
    for value in [0, -1, None, "5", 1.5, True, [], b"", float("inf")]:
        tried += 1
        wrong = named_error("maxsize", DeltaHistoryCache, value)
        if wrong:
            violations.append(f"DeltaHistoryCache({_r(value)}): {wrong}")
    report(violations, tried, "constructors")


POLICY_BAD: dict[str, list[Any]] = {
    "bool": [None, 0, 1, 1.5, b"t", "", "yes", [], {}, object()],
    "int | None": [-1, 1.5, True, "3", b"3", [], {}, object(), float("nan")],
    "timedelta | None": [0, -1, 1.5, True, "1d", b"", [], {}, timedelta(seconds=-1), object()],
    "frozenset[str]": [None, 0, "abc", b"ab", [1], [None], object(), True],
    "LeafPredicate | None": [0, "f", b"", [], {}, True, object()],
    "StepPredicate | None": [0, "f", b"", [], {}, True, object()],
    "Pregel[Any, Any, Any, Any] | None": [0, "g", b"", [], {}, True, object()],
}


def test_retention_policy_fields() -> None:
    """Every field, by its declared type (a new field with a new type fails here)."""
    violations: list[str] = []
    tried = 0
    for field in dataclasses.fields(RetentionPolicy):
        assert str(field.type) in POLICY_BAD, f"no bad values for {field.name}: {field.type}"
        for value in POLICY_BAD[str(field.type)]:
            tried += 1
            wrong = named_error(field.name, RetentionPolicy, **{field.name: value})
            if wrong:
                violations.append(f"RetentionPolicy({field.name}={_r(value)}): {wrong}")
    # Fields that are only wrong together name the one to add.
    together: list[tuple[dict[str, Any], str]] = [
        ({"history_keep_runs": 3}, "history_min_age"),
        ({"compact_steps": True}, "history_min_age"),
        ({"keep_step": lambda node: True}, "compact_steps"),
    ]
    field_names = {f.name for f in dataclasses.fields(RetentionPolicy)}
    for kwargs, name in together:
        if set(kwargs) <= field_names:
            tried += 1
            wrong = named_error(name, RetentionPolicy, **kwargs)
            if wrong:
                violations.append(f"RetentionPolicy({kwargs}): {wrong}")
    report(violations, tried, "RetentionPolicy")


# Stores


@contextmanager
def opened(kind: str, request: pytest.FixtureRequest, name: str) -> Iterator[Any]:
    """A fresh, empty bare saver of `kind` (its own file or database, at `saver.target`)."""
    target = store(kind, request, name)
    with open_sync_at(kind, target) as saver:
        if kind != "memory":
            saver.setup()  # type: ignore[attr-defined]
            saver.target = target  # type: ignore[attr-defined]
        yield saver


def stamped(saver: BaseCheckpointSaver[Any], thread_id: str) -> str:
    """A turn, then a stamp on its head; the stamp's id."""
    chat_graph(saver).invoke(turn(0), thread(thread_id))
    stamp = write_duration_leaf(saver, thread_id, "r", 1.0)
    assert stamp is not None
    return stamp


def rows_of(saver: BaseCheckpointSaver[Any]) -> dict[str, int]:
    stats = RetainingSaver(saver).storage_stats()
    return {table: t.rows for table, t in stats.tables.items()}


def exists(saver: BaseCheckpointSaver[Any], thread_id: str, checkpoint_id: str) -> bool:
    """Whether the row is there, asked of the backend (a pass-through case may have left
    writes the saver's own read of that checkpoint cannot sort)."""
    backend = RetainingSaver(saver)._backend
    assert backend is not None
    return checkpoint_id in run(
        backend, backend.load_nodes(thread_id, "", [checkpoint_id]), Mode.READ
    )


# The library's own entry points, per kind


Case = tuple[str, str, str, tuple[Any, ...], dict[str, Any]]
"""(argument name, method, label, args, kwargs) of one wrong call."""


def entry_point_cases(kind: str) -> list[Case]:
    """Every wrong input of the library's own entry points, as (argument, method, ...)."""
    cases: list[Case] = []

    def add(name: str, method: str, *args: Any, **kwargs: Any) -> None:
        shown = [*map(_r, args), *(f"{k}={_r(v)}" for k, v in kwargs.items())]
        cases.append((name, method, f"{method}({', '.join(shown)})", args, kwargs))

    bad_ids = [*WRONG_TYPES, ""]
    if kind == "postgres":
        bad_ids.append(NUL)  # Postgres text cannot hold it: a wrong value there
    for v in bad_ids:
        for method in ("admit", "aadmit", "enforce_thread_retention", "aenforce_thread_retention"):
            add("thread_id", method, v)
        add("thread_ids", "enforce_retention", [v])
        add("thread_ids", "aenforce_retention", [v])
        if v is not None:
            add("thread_id", "storage_stats", v)
            add("thread_id", "astorage_stats", v)
    for v in [None, 0, 1.5, True, b"", [], {}, object()]:
        add("checkpoint_ns", "admit", "t", checkpoint_ns=v)
        add("checkpoint_ns", "aadmit", "t", checkpoint_ns=v)
    for v in [0, 1, True, "", "policy", b"", [], {}, RetentionPolicy, object()]:
        add("policy", "enforce_thread_retention", "t", v)
        add("policy", "aenforce_thread_retention", "t", v)
        add("policy", "enforce_retention", ["t"], v)
    for v in [None, 0, 1, "", "yes", "no", b"", [], {}, object()]:
        add("dry_run", "enforce_thread_retention", "t", dry_run=v)
        add("dry_run", "aenforce_thread_retention", "t", dry_run=v)
        add("dry_run", "enforce_retention", ["t"], dry_run=v)
        add("channels", "enforce_thread_retention", "t", channels=v)
        add("channels", "aenforce_thread_retention", "t", channels=v)
        add("channels", "enforce_retention", ["t"], channels=v)
        add("channels", "aenforce_retention", ["t"], channels=v)
    for v in [0, 1, 1.5, True, "", "2024-01-01", b"", [], {}, object()]:
        add("now", "enforce_thread_retention", "t", now=v)
        add("now", "aenforce_thread_retention", "t", now=v)
    # A wrong id after good ones stops the stream there (ids are checked as they are used),
    # so the wrong one comes first here.
    for v in ["t", "", b"t", 0, 1, True, 1.5, object(), [None], [0], [b"t"], [""], [5, "t"]]:
        add("thread_ids", "enforce_retention", v)
        add("thread_ids", "aenforce_retention", v)
    for v in [0, -1, None, "10", 1.5, True, b"", [], {}]:
        add("page_size", "enforce_retention", page_size=v)
        add("page_size", "aenforce_retention", page_size=v)
    # Compaction is SQLite's: elsewhere any call is refused, naming SQLite.
    name = "min_free_ratio" if kind == "sqlite" else "SQLite"
    for v in [-0.1, 1.5, float("nan"), float("inf"), "0.5", None, [], True, b""]:
        add(name, "compact_storage", v)
        add(name, "acompact_storage", v)
    return cases


def call_of(saver: RetainingSaver, method: str) -> Callable[..., Any]:
    """`saver.<method>`, its report stream drained where it streams."""
    bound: Callable[..., Any] = getattr(saver, method)
    if method == "enforce_retention":
        return lambda *args, **kwargs: list(bound(*args, **kwargs))
    if method == "aenforce_retention":
        return lambda *args, **kwargs: _drain(bound(*args, **kwargs))
    return bound


async def _drain(reports: Any) -> list[Any]:
    return [r async for r in reports]


@pytest.mark.parametrize("kind", KINDS)
def test_library_entry_points_refuse_wrong_inputs(
    kind: str, request: pytest.FixtureRequest
) -> None:
    violations: list[str] = []
    cases = entry_point_cases(kind)
    with opened(kind, request, "entry") as bare:
        stamp = stamped(bare, "t")
        saver = RetainingSaver(bare)
        before = rows_of(bare)
        for name, method, label, args, kwargs in cases:
            wrong = named_error(name, call_of(saver, method), *args, **kwargs)
            if wrong:
                violations.append(f"{label}: {wrong}")
            if rows_of(bare) != before or not exists(bare, "t", stamp):
                violations.append(f"{label}: deleted or wrote rows: {before} -> {rows_of(bare)}")
                stamp = write_duration_leaf(bare, "t", "again") or stamp
                before = rows_of(bare)
        assert integrity(bare, "t").clean
    report(violations, len(cases), f"{kind} entry points")


# Hostile but valid ids, per kind


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_ids_are_ids_like_any_other(kind: str, request: pytest.FixtureRequest) -> None:
    """Threads named with quotes, `;`, `%`, unicode, NUL (where the store holds it) and
    100 000 characters: stats, dry runs, admission, pinned reads of the reclaimed id, the
    engine, and hostile namespaces all behave as on a plain thread, and touch no other."""
    violations: list[str] = []
    tried = 0
    with opened(kind, request, "hostile") as bare:
        control = stamped(bare, "control")
        saver = RetainingSaver(bare)
        for name in HOSTILE:
            if kind == "postgres" and name == NUL:
                continue  # no Postgres text holds NUL: see the entry-point test
            tried += 1
            label = f"thread {_r(name)}"
            try:
                stamp = stamped(bare, name)
                rows = saver.storage_stats(name).rows
                if rows != sum(rows_of_thread(bare, name).values()) or rows == 0:
                    violations.append(f"{label}: storage_stats says {rows} rows")
                dry = saver.enforce_thread_retention(name, dry_run=True)
                if list(dry.deleted) != [("", stamp)]:
                    violations.append(f"{label}: dry run plans {dict(dry.deleted)}")
                result = saver.admit(name)
                if result.reclaimed != (stamp,):
                    violations.append(f"{label}: admit reclaimed {result.reclaimed}")
                pinned = saver.get_tuple(thread(name, stamp))
                if pinned is None or pinned.checkpoint["id"] != result.head_id:
                    violations.append(f"{label}: the reclaimed id does not name its clone")
                after = [r.deleted for r in saver.enforce_retention([name])]
                if after != [{}]:
                    violations.append(f"{label}: the engine found more: {after}")
                ns = saver.admit("control", checkpoint_ns=name)
                if ns.skipped is not Skip.EMPTY_THREAD:
                    violations.append(f"{label} as a namespace: {ns}")
                if not integrity(bare, name).clean:
                    violations.append(f"{label}: integrity {integrity(bare, name)}")
                values = chat_graph(saver).invoke(turn(1), thread(name))
                if len(values["said"]) != 4:
                    violations.append(f"{label}: a run after admission said {values['said']}")
            except Exception as error:
                violations.append(f"{label}: {error!r}"[:300])
        if not exists(bare, "control", control):
            violations.append("the control thread lost its stamp")
    report(violations, tried, f"{kind} hostile ids")


def rows_of_thread(saver: BaseCheckpointSaver[Any], thread_id: str) -> dict[str, int]:
    stats = RetainingSaver(saver).storage_stats(thread_id)
    return {table: t.rows for table, t in stats.tables.items()}


# Pass-throughs: exactly what the bare saver does


def summarize(value: Any) -> Any:
    """An answer's shape, free of ids and timestamps (which differ between two stores)."""
    if value is None:
        return None
    if isinstance(value, CheckpointTuple):
        metadata = value.metadata or {}
        said = value.checkpoint.get("channel_values", {}).get("said")
        return (
            "tuple",
            metadata.get("source"),
            metadata.get("step"),
            len(value.pending_writes or ()),
            None if said is None else len(said),
        )
    if isinstance(value, list):
        return ["list", *map(summarize, value)]
    if isinstance(value, dict):
        configurable = value.get("configurable", {})
        return ("config", sorted(configurable), configurable.get("checkpoint_ns"))
    return type(value).__name__


def outcome(call: Callable[..., Any], *args: Any) -> Any:
    """("ok", the answer's shape) or ("raise", the exception's type)."""
    try:
        return ("ok", summarize(call(*args)))
    except Exception as error:
        return ("raise", type(error).__name__)


async def aoutcome(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return ("ok", summarize(await call(*args)))
    except Exception as error:
        return ("raise", type(error).__name__)


def _method(saver: Any, call: str) -> Callable[..., Any]:
    """`saver.<call>`; `list` collected, its keyword arguments passed as one dict."""
    if call != "list":
        method: Callable[..., Any] = getattr(saver, call)
        return method

    def listed(config: Any, kwargs: dict[str, Any] | None = None) -> list[Any]:
        return list(saver.list(config, **(kwargs or {})))

    return listed


def _amethod(saver: Any, call: str) -> Callable[..., Any]:
    if call != "alist":
        method: Callable[..., Any] = getattr(saver, call)
        return method

    async def listed(config: Any) -> list[Any]:
        return [t async for t in saver.alist(config)]

    return listed


def bad_configs(head: str) -> list[tuple[str, Any]]:
    """(label, config): wrong shapes, wrong and hostile thread ids, namespaces and ids,
    and admission reads (LangGraph's runtime key) of wrong thread ids."""
    configs: list[tuple[str, Any]] = [
        ("None", None),
        ("{}", {}),
        ("configurable=None", {"configurable": None}),
        ("configurable={}", {"configurable": {}}),
        ("configurable=[]", {"configurable": []}),
    ]
    for v in [*WRONG_TYPES, "", *HOSTILE]:
        configs.append((f"thread_id={_r(v)}", {"configurable": {"thread_id": v}}))
        runtime = {"thread_id": v, "checkpoint_ns": "", RUNTIME_KEY: object()}
        configs.append((f"admission read of thread_id={_r(v)}", {"configurable": runtime}))
    for v in [None, 0, b"", [], "x'y", "%s", NUL]:
        configs.append(
            (f"checkpoint_ns={_r(v)}", {"configurable": {"thread_id": "t", "checkpoint_ns": v}})
        )
    for v in [None, 0, "", b"x", [], "nope", "x'; --", "%s", NUL, HUGE_ID, head.upper()]:
        pinned: dict[str, Any] = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": v}
        configs.append((f"checkpoint_id={_r(v)}", {"configurable": pinned}))
    return configs


def list_cases() -> list[tuple[str, dict[str, Any]]]:
    cases: list[tuple[str, dict[str, Any]]] = []
    for f in [
        {"source": "'; DROP TABLE checkpoints; --"},
        {"a'b": 1},
        {"step": "1 OR 1=1"},
        {"source": NUL},
        {"%s": "%s"},
        {"source": ["update"]},
        {"run_durations": {}},
        [],
        "source",
        0,
    ]:
        cases.append((f"filter={_r(f)}", {"filter": f}))
    for v in [0, -1, "1", 1.5, [], True, 10**12]:
        cases.append((f"limit={_r(v)}", {"limit": v}))
    for v in [{}, {"configurable": {}}, {"configurable": {"checkpoint_id": "'"}}, 5, "x"]:
        cases.append((f"before={_r(v)}", {"before": v}))
    return cases


def put_cases(head_config: Any) -> list[tuple[str, Callable[[], tuple[Any, ...]]]]:
    """(label, arguments of `put`) for wrong configs, hostile thread ids and metadata."""
    cases: list[tuple[str, Callable[[], tuple[Any, ...]]]] = []

    def checkpoint() -> Any:
        made = empty_checkpoint()
        made["id"] = str(uuid6(clock_seq=-1))
        return made

    def args(config: Any, metadata: Any = None, versions: Any = None) -> Any:
        fixed = checkpoint()
        return lambda: (config, fixed, metadata if metadata is not None else {}, versions or {})

    for v in [*WRONG_TYPES[:7], "", *HOSTILE]:
        cases.append(
            (
                f"put on thread_id={_r(v)}",
                args({"configurable": {"thread_id": v, "checkpoint_ns": ""}}),
            )
        )
    cases.append(("put with config=None", args(None)))
    cases.append(("put with configurable={}", args({"configurable": {}})))
    for key, value in [
        ("source", "'; DROP TABLE checkpoints; --"),
        ("a'b\"c", "%s %(x)s"),
        ("nul", NUL),
        (NUL, "key"),
        ("unicode", "日本語 🙂"),
        ("big", "m" * 3_000_000),
        ("nested", {"deep": [{"x": "'"}] * 1000}),
    ]:
        cases.append((f"put with metadata {_r(key)}={_r(value)}", args(head_config, {key: value})))
    cases.append(("put with metadata=[]", args(head_config, [])))
    cases.append(("put with new_versions={'said': None}", args(head_config, {}, {"said": None})))
    return cases


def write_cases(head_config: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """(label, arguments of `put_writes`)."""
    cases: list[tuple[str, tuple[Any, ...]]] = []
    for writes in [
        [("said", ["x"])],
        [("ch'; DROP TABLE writes; --", "v")],
        [("said", "w" * 3_000_000)],
        [("said", NUL)],
        [(NUL, "v")],
        [],
        None,
        "ab",
        [("a",)],
    ]:
        cases.append((f"put_writes(writes={_r(writes)})", (head_config, writes, "task-1")))
    for task_id in ["t'1", "", NUL, "%s", 0, None, HUGE_ID]:
        cases.append(
            (f"put_writes(task_id={_r(task_id)})", (head_config, [("said", ["y"])], task_id))
        )
    for label, config in [
        ("unpinned", {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}),
        ("None", None),
        (
            "hostile thread",
            {"configurable": {"thread_id": "a'b", "checkpoint_ns": "", "checkpoint_id": "x"}},
        ),
        ("NUL id", {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": NUL}}),
    ]:
        cases.append((f"put_writes(config {label})", (config, [("said", ["z"])], "task-2")))
    return cases


@pytest.mark.parametrize("kind", KINDS)
def test_pass_throughs_do_what_the_bare_saver_does(
    kind: str, request: pytest.FixtureRequest
) -> None:
    violations: list[str] = []
    tried = 0
    with opened(kind, request, "bare") as bare, opened(kind, request, "inner") as inner:
        stamps = {"bare": stamped(bare, "t"), "inner": stamped(inner, "t")}
        # Explicit admission: no run here admits, and no write reclaims the stamp it lands
        # on (that is the law's business, tested against a never-stamped reference in
        # test_law_stateful); what is compared is the pass-through itself.
        saver = RetainingSaver(inner, admission="explicit")
        heads = {name: s.get_tuple(thread("t")) for name, s in (("bare", bare), ("inner", inner))}

        def compare(label: str, call: str, bare_args: Any, saver_args: Any = None) -> None:
            """`call` on the bare saver and on the wrapper, with these arguments each."""
            nonlocal tried
            tried += 1
            rows_bare, rows_inner = rows_of(bare), rows_of(inner)
            want = outcome(_method(bare, call), *bare_args)
            got = outcome(_method(saver, call), *(saver_args or bare_args))
            if got != want:
                violations.append(f"{label}: bare {want}, wrapped {got}")
            grown_bare = _delta(rows_bare, rows_of(bare))
            grown_inner = _delta(rows_inner, rows_of(inner))
            if grown_bare != grown_inner:
                violations.append(f"{label}: rows changed {grown_bare} bare, {grown_inner} wrapped")

        for label, config in bad_configs(stamps["inner"]):
            compare(f"get_tuple({label})", "get_tuple", (config,))
            compare(f"list({label})", "list", (config,))
        for label, kwargs in list_cases():
            compare(f"list({label})", "list", (thread("t"), kwargs))
        head_bare, head_inner = heads["bare"], heads["inner"]
        assert head_bare is not None and head_inner is not None
        for (label, bare_args), (_, inner_args) in zip(
            put_cases(head_bare.config), put_cases(head_inner.config), strict=True
        ):
            compare(label, "put", bare_args(), inner_args())
        # Writes go to the stamp's parent, so that the stamp itself stays readable.
        for (label, b_args), (_, i_args) in zip(
            write_cases(head_bare.parent_config), write_cases(head_inner.parent_config), strict=True
        ):
            compare(label, "put_writes", b_args, i_args)
        tried += async_pass_throughs(kind, bare, inner, violations)
        # Nothing of the prepared thread was deleted, and it holds what the bare one holds.
        if not exists(inner, "t", stamps["inner"]):
            violations.append("the wrapped store lost its stamp")
        if integrity(inner, "t") != integrity(bare, "t"):
            violations.append(f"integrity {integrity(inner, 't')}, bare {integrity(bare, 't')}")
    report(violations, tried, f"{kind} pass-throughs")


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {table: after[table] - before[table] for table in after}


def async_pass_throughs(kind: str, bare: Any, inner: Any, violations: list[str]) -> int:
    """The async twins, over the async savers of the same two stores."""

    async def body() -> int:
        async with _async_pair(kind, bare, inner) as (abare, ainner):
            saver = RetainingSaver(ainner, admission="explicit")
            tried = 0
            head = await ainner.aget_tuple(thread("t"))
            head_bare = await abare.aget_tuple(thread("t"))
            for label, config in bad_configs(head.checkpoint["id"]):
                for call in ("aget_tuple", "alist"):
                    tried += 1
                    want = await aoutcome(_amethod(abare, call), config)
                    got = await aoutcome(_amethod(saver, call), config)
                    if got != want:
                        violations.append(f"{call}({label}): bare {want}, wrapped {got}")
            for (label, b_args), (_, i_args) in zip(
                put_cases(head_bare.config), put_cases(head.config), strict=True
            ):
                tried += 1
                want = await aoutcome(abare.aput, *b_args())
                got = await aoutcome(saver.aput, *i_args())
                if got != want:
                    violations.append(f"a{label}: bare {want}, wrapped {got}")
            for (label, bargs), (_, iargs) in zip(
                write_cases(head_bare.parent_config), write_cases(head.parent_config), strict=True
            ):
                tried += 1
                want = await aoutcome(abare.aput_writes, *bargs)
                got = await aoutcome(saver.aput_writes, *iargs)
                if got != want:
                    violations.append(f"a{label}: bare {want}, wrapped {got}")
            return tried

    return asyncio.run(body())


class _async_pair:
    """The async savers over the stores of `bare` and `inner` (memory: themselves)."""

    def __init__(self, kind: str, bare: Any, inner: Any) -> None:
        self.kind, self.bare, self.inner = kind, bare, inner
        self.stack: Any = None

    async def __aenter__(self) -> tuple[Any, Any]:
        if self.kind == "memory":
            return self.bare, self.inner
        from contextlib import AsyncExitStack

        self.stack = AsyncExitStack()
        first = await self.stack.enter_async_context(open_async_at(self.kind, self.bare.target))
        second = await self.stack.enter_async_context(open_async_at(self.kind, self.inner.target))
        return first, second

    async def __aexit__(self, *exc: object) -> None:
        if self.stack is not None:
            await self.stack.aclose()


# A stamp with a few MB of metadata


@pytest.mark.parametrize("kind", KINDS)
def test_a_stamp_with_megabytes_of_metadata(kind: str, request: pytest.FixtureRequest) -> None:
    with opened(kind, request, "bare") as bare, opened(kind, request, "inner") as inner:
        saver = RetainingSaver(inner)
        results = []
        for target in (bare, saver):
            graph = chat_graph(target)
            graph.invoke(turn(0), thread("big"))
            head = target.get_tuple(thread("big"))
            assert head is not None
            checkpoint: Any = {**head.checkpoint, "id": str(uuid6(clock_seq=-1))}
            checkpoint["ts"] = datetime.now(UTC).isoformat()
            metadata: Any = {
                "source": "update",
                "step": head.metadata["step"] + 1,
                "run_durations": {"r": 1.0},
                "run_message_ids": {"r": []},
                "notes": "n" * 3_000_000,
                "parents": {},
            }
            target.put(head.config, checkpoint, metadata, {})
            listed = list(target.list(thread("big"), filter={"source": "update"}))
            assert len(listed) == 1 and len(listed[0].metadata["notes"]) == 3_000_000
            results.append(graph.invoke(turn(1), thread("big")))
        assert results[0] == results[1]
        assert saver.counters.reclaimed == 1, saver.counters
        assert integrity(inner, "big").clean
        assert not list(inner.list(thread("big"), filter={"source": "update"}))
