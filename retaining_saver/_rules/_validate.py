"""Argument checks shared by every public entry point: each error names its argument."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any


def require(ok: bool, error: type[Exception], message: str) -> None:
    """Raise `error(message)` unless `ok`."""
    if not ok:
        raise error(message)


def flag(name: str, value: Any) -> bool:
    """`value`, which must be a bool."""
    require(isinstance(value, bool), TypeError, f"{name} must be a bool, got {value!r}")
    return bool(value)


def optional_callable(name: str, value: Any) -> Any:
    """`value`, which must be callable or None."""
    require(value is None or callable(value), TypeError, f"{name} must be callable or None")
    return value


def ids(name: str, value: Any) -> frozenset[str]:
    """`value` as a frozenset of str ids.

    Materialised before it is checked: a generator would be used up by the check.
    """
    try:
        frozen = None if isinstance(value, str | bytes) else frozenset(value)
    except TypeError:
        frozen = None
    require(
        frozen is not None and all(isinstance(i, str) for i in frozen),
        TypeError,
        f"{name} must be a collection of checkpoint id strings, got {value!r}",
    )
    assert frozen is not None
    return frozen


def items_of(name: str, value: Any, kind: type, what: str) -> tuple[Any, ...]:
    """`value`, an iterable (not a str) of instances of `kind` (a class that only looks
    like one is refused), as a tuple; `what` names `kind`."""
    ok = isinstance(value, Iterable) and not isinstance(value, str | bytes)
    items = tuple(value) if ok else ()
    require(
        ok and all(isinstance(i, kind) and not isinstance(i, type) for i in items),
        TypeError,
        f"{name} must be a sequence of {what}, got {value!r}",
    )
    return items


def duration(name: str, value: Any, *, optional: bool = False, positive: bool = False) -> Any:
    """`value`, a non-negative `timedelta` (positive with `positive`; None with `optional`)."""
    if value is None and optional:
        return None
    kind = "a timedelta or None" if optional else "a timedelta"
    require(isinstance(value, timedelta), TypeError, f"{name} must be {kind}, got {value!r}")
    bound = "> 0" if positive else ">= 0"
    low_ok = value > timedelta(0) if positive else value >= timedelta(0)
    require(low_ok, ValueError, f"{name} must be {bound}, got {value!r}")
    return value


def count(name: str, value: Any, *, optional: bool = False, minimum: int = 0) -> Any:
    """`value`, an int of at least `minimum` (None with `optional`)."""
    if value is None and optional:
        return None
    kind = "an int or None" if optional else "an int"
    ok = isinstance(value, int) and not isinstance(value, bool)
    require(ok, TypeError, f"{name} must be {kind}, got {value!r}")
    require(value >= minimum, ValueError, f"{name} must be >= {minimum}, got {value!r}")
    return value


def thread_id(name: str, value: Any, *, nul_ok: bool = True) -> str:
    """`value`, a non-empty str thread id (never `str()`-ed: `None` is no thread "None");
    without NUL unless `nul_ok` (Postgres text holds no NUL; SQLite and memory do)."""
    require(
        isinstance(value, str) and bool(value),
        TypeError,
        f"{name} must be a non-empty str, got {value!r}",
    )
    require(
        nul_ok or "\x00" not in value,
        ValueError,
        f"{name} must not contain NUL on this store, got {value!r}",
    )
    return str(value)


def moment(name: str, value: Any) -> Any:
    """`value`, a `datetime` or None (naive times are taken as UTC)."""
    require(
        value is None or isinstance(value, datetime),
        TypeError,
        f"{name} must be a datetime or None, got {value!r}",
    )
    return value


def optional_thread_id(name: str, value: Any, *, nul_ok: bool = True) -> str | None:
    """`thread_id`, or None."""
    return None if value is None else thread_id(name, value, nul_ok=nul_ok)


def thread_ids(name: str, value: Any, *, nul_ok: bool = True) -> Iterable[str] | None:
    """`value`, None or an iterable of thread ids that is not itself a str; each id is
    checked as it is used, so a generator streams."""
    if value is None:
        return None
    require(
        isinstance(value, Iterable) and not isinstance(value, str | bytes),
        TypeError,
        f"{name} must be an iterable of thread id strings (not one str), got {value!r}",
    )
    return (thread_id(name, t, nul_ok=nul_ok) for t in value)
