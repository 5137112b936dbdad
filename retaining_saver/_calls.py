"""`Call`: the effect of a method with a sync and an async twin (apart from `_effects`
for its length; `_effects` names it among the effects and re-exports it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Call:
    """A method with a sync and an async twin (the saver's own `delete_thread`, say):
    `sync(*args)`, or `await asynchronous(*args)`, as the driver runs; answers its result.
    (`performer`, the driver's `_effects.Performer`, is not needed: no import of it here.)"""

    sync: Callable[..., Any]
    asynchronous: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()

    def perform(self, performer: Any) -> Any:
        return self.sync(*self.args)

    async def aperform(self, performer: Any) -> Any:
        return await self.asynchronous(*self.args)
