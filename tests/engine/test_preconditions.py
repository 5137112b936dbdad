"""Each deletion's preconditions are stated once, as data (`_rules._checks.PRECONDITIONS`):
the docstrings render that table, and every statement that guards a deletion names, in a
`check:` comment on each guard clause, exactly the checks of its kind."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import pytest

import retaining_saver._rules as rules
from retaining_saver._rules import PRECONDITIONS, DeletionKind
from retaining_saver._rules import _checks as checks
from retaining_saver._rules._check import first_failed
from retaining_saver._rules._thread_checks import (
    THREAD_CHECKS,
    Held,
    JudgedThread,
    ThreadFacts,
    ThreadRecheck,
)
from retaining_saver.backends import (
    _memory_resumes,
    _sqlite_sql,
    _sqlite_sql_plan,
    _sqlite_sql_resumes,
    _sweep,
    memory,
)

try:  # the Postgres statements need psycopg, an extra
    from retaining_saver.backends import (
        _postgres_sql,
        _postgres_sql_admission,
        _postgres_sql_plan,
        _postgres_sql_resumes,
        _postgres_sql_sweep,
        _postgres_sql_take,
    )
except ImportError:  # pragma: no cover
    _postgres_sql = _postgres_sql_admission = _postgres_sql_plan = _postgres_sql_take = None  # type: ignore[assignment]
    _postgres_sql_resumes = _postgres_sql_sweep = None  # type: ignore[assignment]

MARKER = re.compile(r"(?:--|#)\s*check:\s*([a-z-]+)")
"""A guard clause's comment naming the check it enforces (`-- check:` in SQL, `#` in Python)."""


def named_checks(text: str) -> set[str]:
    """The checks the guard comments in `text` name."""
    return set(MARKER.findall(text))


def _text(module: object, name: str) -> Callable[[], str]:
    return lambda: str(getattr(module, name))


def _source(function: object) -> Callable[[], str]:
    return lambda: inspect.getsource(function)  # type: ignore[arg-type]


GUARDS: dict[str, tuple[DeletionKind, Callable[[], str]]] = {
    "sqlite DELETE_CHECKPOINT_GUARDED_SQL": (
        DeletionKind.ROW,
        _text(_sqlite_sql_plan, "DELETE_CHECKPOINT_GUARDED_SQL"),
    ),
    "memory delete_rows": (DeletionKind.ROW, _source(memory.MemoryBackend.delete_rows)),
    "sqlite DELETE_WRITE_SQL": (DeletionKind.WRITES, _text(_sqlite_sql, "DELETE_WRITE_SQL")),
    "memory delete_writes": (
        DeletionKind.WRITES,
        _source(memory.MemoryBackend.delete_writes),
    ),
    "sqlite DELETE_UNRECORDED_WRITES_SQL": (
        DeletionKind.WRITES,
        _text(_sqlite_sql_resumes, "DELETE_UNRECORDED_WRITES_SQL"),
    ),
    "sqlite RESTORE_RECORDED_WRITES_SQL": (
        DeletionKind.WRITES,
        _text(_sqlite_sql_resumes, "RESTORE_RECORDED_WRITES_SQL"),
    ),
    "memory restore_writes": (
        DeletionKind.WRITES,
        _source(_memory_resumes.MemoryResumes.restore_writes),
    ),
}
GUARDS |= {
    "sweep locked_act and SqlSweep._nothing_left": (
        DeletionKind.THREAD,
        lambda: (
            inspect.getsource(_sweep.locked_act) + inspect.getsource(_sweep.SqlSweep._nothing_left)
        ),
    ),
    "sqlite sweep: locked_act and SELECT_THREAD_LEFT_SQL": (
        DeletionKind.THREAD,
        lambda: inspect.getsource(_sweep.locked_act) + _sqlite_sql_plan.SELECT_THREAD_LEFT_SQL,
    ),
}
"""Each statement that guards a deletion itself, and the kind whose checks it enforces. The
other kinds are judged by the rules on rows read in the transaction (`_recheck`); a whole
thread's deletion is guarded by a few statements together, each part naming its checks."""
if _postgres_sql_take is not None:
    GUARDS |= {
        "postgres RECLAIM_LEAF_SQL": (
            DeletionKind.TAKE,
            _text(_postgres_sql_take, "RECLAIM_LEAF_SQL"),
        ),
        "postgres RECLAIM_LEAF_READ_SQL": (
            DeletionKind.TAKE,
            _text(_postgres_sql_take, "RECLAIM_LEAF_READ_SQL"),
        ),
        "postgres ADMIT_AND_READ_SQL": (
            DeletionKind.TAKE,
            _text(_postgres_sql_admission, "ADMIT_AND_READ_SQL"),
        ),
        "postgres ADMIT_EXPIRE_AND_READ_SQL": (
            DeletionKind.TAKE,
            _text(_postgres_sql_admission, "ADMIT_EXPIRE_AND_READ_SQL"),
        ),
        "postgres DELETE_ROWS_SQL": (
            DeletionKind.ROW,
            _text(_postgres_sql_plan, "DELETE_ROWS_SQL"),
        ),
        "postgres DELETE_WRITE_SQL": (
            DeletionKind.WRITES,
            _text(_postgres_sql, "DELETE_WRITE_SQL"),
        ),
        "postgres DELETE_UNRECORDED_WRITES_SQL": (
            DeletionKind.WRITES,
            _text(_postgres_sql_resumes, "DELETE_UNRECORDED_WRITES_SQL"),
        ),
        "postgres RESTORE_RECORDED_WRITES_SQL": (
            DeletionKind.WRITES,
            _text(_postgres_sql_resumes, "RESTORE_RECORDED_WRITES_SQL"),
        ),
        "postgres sweep: DELETE_THREAD_IF_UNCHANGED_SQL, SELECT_THREAD_LEFT_SQL": (
            DeletionKind.THREAD,
            lambda: (
                _postgres_sql_sweep.DELETE_THREAD_IF_UNCHANGED_SQL
                + _postgres_sql_sweep.SELECT_THREAD_LEFT_SQL
            ),
        ),
        "postgres sweep batch: DELETE_THREAD_IF_UNCHANGED_SQL, SELECT_NOTHING_LEFT_SQL": (
            DeletionKind.THREAD,
            lambda: (
                _postgres_sql_sweep.DELETE_THREAD_IF_UNCHANGED_SQL
                + _postgres_sql_sweep.SELECT_NOTHING_LEFT_SQL
            ),
        ),
    }


def disagreement(kind: DeletionKind, text: str) -> tuple[set[str], set[str]]:
    """The checks of `kind` no guard in `text` names, and the names no check of `kind` has."""
    wanted = {check.name for check in PRECONDITIONS[kind]}
    named = named_checks(text)
    return wanted - named, named - wanted


@pytest.mark.parametrize("statement", sorted(GUARDS))
def test_each_guarded_statement_names_exactly_its_kinds_checks(statement: str) -> None:
    kind, text = GUARDS[statement]
    assert disagreement(kind, text()) == (set(), set())


def test_a_statement_missing_a_marker_disagrees() -> None:
    kind, text = GUARDS["sqlite DELETE_CHECKPOINT_GUARDED_SQL"]
    cut = text().replace("-- check: childless", "", 1)
    assert disagreement(kind, cut) == ({"childless"}, set())


def test_a_marker_naming_no_check_of_its_kind_disagrees() -> None:
    kind, text = GUARDS["memory delete_rows"]
    assert disagreement(kind, text() + "\n# check: newest-parent-next") == (
        set(),
        {"newest-parent-next"},
    )


@pytest.mark.skipif(_postgres_sql_take is None, reason="psycopg is not installed")
def test_the_takes_two_newest_guards_are_one_named_check() -> None:
    """The take's "newest, its parent next" is one check, which both of Postgres's
    statements name (as `ARRAY(... LIMIT 2)` in one, `NOT EXISTS` in the other)."""
    for module, name in (
        (_postgres_sql_take, "RECLAIM_LEAF_SQL"),
        (_postgres_sql_admission, "ADMIT_AND_READ_SQL"),
    ):
        sql = getattr(module, name)
        assert "newest-parent-next" in named_checks(sql), name
    assert [c.name for c in PRECONDITIONS[DeletionKind.TAKE]].count("newest-parent-next") == 1


def test_every_kind_has_checks_and_each_name_one_meaning() -> None:
    assert set(PRECONDITIONS) == set(DeletionKind)
    meaning: dict[str, object] = {}
    for kind_checks in PRECONDITIONS.values():
        for check in kind_checks:
            assert meaning.setdefault(check.name, check.predicate) is check.predicate, check.name


def test_the_docstring_renders_the_table() -> None:
    assert checks.preconditions_table() in (checks.__doc__ or "")
    assert "PRECONDITIONS" in (rules.__doc__ or "")


def test_each_thread_check_stops_a_sweeps_deletion_alone() -> None:
    """The sweep's verdict on a thread judged expired runs the table's thread checks: each
    fails on the one fact that breaks it, and all hold on the thread as judged."""
    judged = JudgedThread("t", "head", 1)
    as_judged = ThreadFacts(locked=True, head_id="head", head_writes=1)
    broken = {
        "locked": ThreadFacts(locked=False, head_id="head", head_writes=1),
        "head-as-judged": ThreadFacts(locked=True, head_id="a-newer-run", head_writes=1),
        "writes-as-judged": ThreadFacts(locked=True, head_id="head", head_writes=2),
        "nothing-left": ThreadFacts(locked=True, head_id="head", head_writes=1, rows_left=True),
    }
    assert list(broken) == [c.name for c in PRECONDITIONS[DeletionKind.THREAD]]
    for name, facts in broken.items():
        failed = first_failed(THREAD_CHECKS, judged, facts)
        assert failed is not None and failed.name == name
    assert first_failed(THREAD_CHECKS, judged, as_judged) is None
    recheck = ThreadRecheck(judged)
    held = {name: recheck.held(facts) for name, facts in broken.items()}
    assert held == {
        "locked": Held.BUSY,
        "head-as-judged": Held.CHANGED,
        "writes-as-judged": Held.CHANGED,
        "nothing-left": None,  # read after the deletes, which it rolls back
    }
    assert recheck.held(as_judged) is None and recheck.left_nothing(as_judged)
    assert not recheck.left_nothing(broken["nothing-left"])
