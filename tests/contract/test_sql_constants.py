"""Every SQL statement is a literal constant of its store's SQL modules, found by name.

Issue #20: a statement spliced from fragments (`+`, `.format`, `.replace`, an
f-string) cannot be searched back to its text. The store's SQL modules hold
nothing but named literal strings; no other backend module holds or builds SQL
text; and every statement the drivers run during a workload is one of those
constants, by identity.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.sqlite.utils import pending_writes_sql
from savers import open_async, open_sync

import retaining_saver.backends.postgres as pg_backend
import retaining_saver.backends.sqlite as sqlite_backend
from retaining_saver import RetainingSaver
from retaining_saver.backends import _postgres_sql_admission, _sqlite_sql
from retaining_saver.backends._postgres_sql_take import RECLAIM_LEAF_READ_SQL
from retaining_saver.testing import awrite_duration_leaf, write_duration_leaf
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, run_read, thread_config

BACKENDS = Path(pg_backend.__file__).parent
SQL_MODULES = {
    "postgres": sorted(BACKENDS.glob("_postgres_sql*.py")),
    "sqlite": sorted(BACKENDS.glob("_sqlite_sql*.py")),
}
# A string that starts like a statement (after blank lines): SELECT, WITH, DELETE, ...
_LOOKS_LIKE_SQL = re.compile(
    r"^\s*(SELECT|WITH|INSERT|UPDATE|DELETE|CREATE|PRAGMA|BEGIN|COMMIT|ROLLBACK|VACUUM|DO|SET)\b"
)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _constants(path: Path) -> dict[str, str]:
    """The module's `NAME_SQL = "literal"` assignments; fails on anything else."""
    found: dict[str, str] = {}
    for node in _tree(path).body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        assert isinstance(node, ast.Assign), f"{path.name}:{node.lineno} is not a constant"
        (target,) = node.targets
        assert isinstance(target, ast.Name) and target.id.endswith("_SQL"), (
            f"{path.name}:{node.lineno}: a statement's name ends in _SQL"
        )
        assert isinstance(node.value, ast.Constant) and isinstance(node.value.value, str), (
            f"{path.name}: {target.id} is not written out as one literal"
        )
        found[target.id] = node.value.value
    return found


def _store_constants(kind: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in SQL_MODULES[kind]:
        for name, text in _constants(path).items():
            assert name not in found, f"{name} is defined twice among the {kind} SQL modules"
            found[name] = text
    return found


@pytest.mark.parametrize("kind", sorted(SQL_MODULES))
def test_a_store_sql_modules_hold_only_named_literals(kind: str) -> None:
    constants = _store_constants(kind)
    assert len(constants) > 20
    for name, text in constants.items():
        # upstream's own text, copied to the letter, is lower case
        assert _LOOKS_LIKE_SQL.match(text.upper()), f"{name} does not read as a statement"


# sqlite3 placeholders: `?` binds from a sequence, in order; `:name` from a mapping. A
# numbered `?1` is a named placeholder to sqlite3, so binding it from a sequence warns
# from Python 3.12 and raises from 3.14.
_SQLITE_NUMBERED = re.compile(r"\?\d")
_SQLITE_NAMED = re.compile(r"(?<![:\w]):[A-Za-z_]\w*")
_SQLITE_QMARK = re.compile(r"\?(?!\d)")


def sqlite_placeholder_faults(constants: dict[str, str]) -> list[str]:
    """The SQLite statements that bind by number, or mix `?` with `:name`."""
    faults = []
    for name, text in constants.items():
        if _SQLITE_NUMBERED.search(text):
            faults.append(f"{name}: a numbered placeholder (`?1`)")
        elif _SQLITE_NAMED.search(text) and _SQLITE_QMARK.search(text):
            faults.append(f"{name}: both `?` and `:name` placeholders")
    return faults


def test_sqlite_statements_bind_by_position_or_by_name_never_by_number() -> None:
    """Python 3.14's sqlite3 refuses a sequence bound to `?1`; every SQLite statement binds
    with plain `?` from a sequence or with `:name` from a mapping."""
    assert sqlite_placeholder_faults(_store_constants("sqlite")) == []
    planted = {"X_SQL": "SELECT 1 WHERE a = ?1", "Y_SQL": "SELECT 1 WHERE a = ? AND b = :b"}
    assert len(sqlite_placeholder_faults(planted)) == 2
    assert sqlite_placeholder_faults({"Z_SQL": "SELECT '12:30', x::text WHERE a = :a"}) == []


def _spliced(node: ast.AST) -> bool:
    """Whether `node` builds a string from parts: `+`/`%` on strings, an f-string, or a
    `.format`/`.replace`/`.join` call on a literal or a `*_SQL` name."""
    if isinstance(node, ast.JoinedStr):
        return bool(_LOOKS_LIKE_SQL.match(ast.unparse(node).strip("f'\"")))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return any(_sql_operand(side) for side in (node.left, node.right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in {"format", "replace", "join"} and _sql_operand(node.func.value)
    return False


def _sql_operand(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_LOOKS_LIKE_SQL.match(node.value))
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return name.endswith("_SQL") or (name.startswith("_") and name.isupper())
    return _spliced(node)


def _backend_modules() -> Iterator[Path]:
    sql = {p for paths in SQL_MODULES.values() for p in paths}
    yield from (p for p in sorted(BACKENDS.glob("*.py")) if p not in sql)


def test_no_backend_module_holds_or_builds_sql_text() -> None:
    for path in _backend_modules():
        for node in ast.walk(_tree(path)):
            assert not _spliced(node), f"{path.name}:{getattr(node, 'lineno', '?')} splices SQL"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not _LOOKS_LIKE_SQL.match(node.value), (
                    f"{path.name}:{node.lineno}: SQL text outside the store's SQL modules"
                )


def test_the_splice_check_can_fail() -> None:
    planted = ast.parse('X = """\nSELECT 1 FROM t {where}\n""".format(where="")\nY = A_SQL + "x"')
    assert sum(_spliced(node) for node in ast.walk(planted)) == 2


def test_copies_of_upstream_sql_are_its_text_to_the_letter() -> None:
    """The saver's own statements, written out in ours, are the audited text exactly."""
    select_sql = BasePostgresSaver.SELECT_SQL
    assert select_sql in _postgres_sql_admission.SELECT_HEAD_ROW_SQL
    # The admission reads change one thing: each blob looked up by its key.
    joined = _between(select_sql, "    (\n        select array_agg(array[bl.", "as channel_values")
    keyed = _between(
        _postgres_sql_admission.ADMIT_AND_READ_SQL,
        "    (\n        select array_agg(array[bl.",
        "as channel_values",
    )
    assert "inner join checkpoint_blobs bl" in joined and "cross join lateral" in keyed
    for name in ("ADMIT_AND_READ_SQL", "ADMIT_EXPIRE_AND_READ_SQL"):
        assert select_sql.replace(joined, keyed) in getattr(_postgres_sql_admission, name), name
    assert select_sql in RECLAIM_LEAF_READ_SQL
    assert pending_writes_sql(True) == _sqlite_sql.SELECT_PENDING_WRITES_SQL
    assert pending_writes_sql(False) == _sqlite_sql.SELECT_PENDING_WRITES_NO_TASK_PATH_SQL


def _between(text: str, start: str, end: str) -> str:
    """`text` from `start` to `end`, both included."""
    at = text.index(start)
    return text[at : text.index(end, at) + len(end)]


def _workload(saver: RetainingSaver, kind: str) -> None:
    """Admission, plans, statistics, whole-thread operations and compaction, on `saver`."""
    graph = build_chat_graph(saver)
    for turn in range(3):
        graph.invoke(chat_turn(turn), thread_config("a"))
    write_duration_leaf(saver, "a")
    saver.get_tuple(run_read("a"))
    write_duration_leaf(saver, "a")
    saver.admit("a")
    saver.storage_stats("a", channels=True)
    saver.storage_stats(channels=True, top_threads=3)
    saver.copy_thread("a", "b")
    saver.prune(["a"])
    saver.delete_for_runs(["no-such-run"])
    saver.delete_thread("b")
    if kind == "sqlite":
        saver.compact_storage(0.0)


@pytest.mark.parametrize("kind", sorted(SQL_MODULES))
def test_every_statement_run_is_a_constant_of_its_store(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    module: Any = sqlite_backend if kind == "sqlite" else pg_backend
    ran: list[str] = []
    execute = module._execute

    def recording(target: Any, statement: Any) -> Any:
        ran.append(statement.sql)
        return execute(target, statement)

    monkeypatch.setattr(module, "_execute", recording)
    with open_sync(kind, request) as inner:
        _workload(RetainingSaver(inner), kind)
    known = {id(text) for text in _module_constants(kind)}
    assert len(set(ran)) > 10
    strays = {text for text in ran if id(text) not in known}
    assert not strays, f"statements run that are no named constant: {strays}"


async def _aworkload(saver: RetainingSaver) -> None:
    """The async admission read (one round trip on Postgres) and async maintenance."""
    graph = build_chat_graph(saver)
    for turn in range(3):
        await graph.ainvoke(chat_turn(turn), thread_config("a"))
    await awrite_duration_leaf(saver, "a")
    await saver.aget_tuple(run_read("a"))
    await saver.aprune(["a"])


@pytest.mark.parametrize("kind", sorted(SQL_MODULES))
async def test_every_statement_run_async_is_a_constant_of_its_store(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    module: Any = sqlite_backend if kind == "sqlite" else pg_backend
    name = "_execute" if kind == "sqlite" else "_aexecute"
    ran: list[str] = []
    execute = getattr(module, name)

    def recording(target: Any, statement: Any) -> Any:
        ran.append(statement.sql)
        return execute(target, statement)

    monkeypatch.setattr(module, name, recording)
    async with open_async(kind, request) as inner:
        await _aworkload(RetainingSaver(inner))
    known = {id(text) for text in _module_constants(kind)}
    assert len(set(ran)) > 5
    strays = {text for text in ran if id(text) not in known}
    assert not strays, f"statements run that are no named constant: {strays}"


def _module_constants(kind: str) -> list[str]:
    """The constants as imported (the very objects the backends run)."""
    import importlib

    texts: list[str] = []
    for path in SQL_MODULES[kind]:
        module = importlib.import_module(f"retaining_saver.backends.{path.stem}")
        texts += [v for k, v in vars(module).items() if k.endswith("_SQL")]
    return texts
