"""The custom checkpointer the Agent Server loads (`langgraph.json`: "checkpointer").

`make_saver` is an async context manager yielding `RetainingSaver` over
`AsyncPostgresSaver` when `RETAINING_SAVER_POSTGRES` holds a connection string, else
over `AsyncSqliteSaver` on the file `RETAINING_SAVER_SQLITE` names (default
`./checkpoints.sqlite`). With `RETAINING_SAVER_SUBCLASS=1` the inner saver is an
app's subclass that adds a method, which keeps cleanup (it stores as its base).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver import RetainingSaver


def _with_a_method(base: type[Any]) -> type[Any]:
    """An app's subclass of `base` that adds a method and stores as `base` does."""

    class AppSaver(base):  # type: ignore[misc, valid-type]
        def describe(self) -> str:
            return f"an app's {base.__name__}"

    return AppSaver


@asynccontextmanager
async def _inner() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    subclass = os.environ.get("RETAINING_SAVER_SUBCLASS") == "1"
    postgres = os.environ.get("RETAINING_SAVER_POSTGRES")
    if postgres:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        kind: type[Any] = _with_a_method(AsyncPostgresSaver) if subclass else AsyncPostgresSaver
        async with kind.from_conn_string(postgres) as saver:
            await saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        kind = _with_a_method(AsyncSqliteSaver) if subclass else AsyncSqliteSaver
        path = os.environ.get("RETAINING_SAVER_SQLITE", "./checkpoints.sqlite")
        async with kind.from_conn_string(path) as saver:
            yield saver


@asynccontextmanager
async def make_saver() -> AsyncIterator[RetainingSaver]:
    """`RetainingSaver` over the store the environment names (see the module docstring)."""
    async with _inner() as inner:
        yield RetainingSaver(inner, strict=True)
