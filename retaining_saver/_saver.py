"""`RetainingSaver`: a drop-in checkpointer that reclaims provably redundant checkpoints."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver._delegate import DelegatingSaver
from retaining_saver._errors import UnsupportedSaverError
from retaining_saver.backends import backend_name

logger = logging.getLogger("retaining_saver")


def _require_bool(flag: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{flag} must be a bool, got {type(value).__name__}")
    return value


class RetainingSaver(DelegatingSaver):
    """Wrap any LangGraph checkpoint saver and keep its storage bounded.

    The wrapper behaves exactly like `inner`; see the README for what it
    reclaims and when.

    Args:
        inner: The saver that stores the checkpoints.
        strict: If True, an `inner` whose storage layout is not supported
            raises `UnsupportedSaverError`. If False (the default), such a saver
            is wrapped with cleanup disabled, and one warning says so.

    Raises:
        TypeError: If `inner` is not a `BaseCheckpointSaver`, or a flag has the
            wrong type.
        UnsupportedSaverError: If `strict` is True and `inner` is not supported.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], /, *, strict: bool = False) -> None:
        super().__init__(inner)
        self.strict = _require_bool("strict", strict)
        self.backend_name = backend_name(inner)
        if self.backend_name is None:
            if self.strict:
                raise UnsupportedSaverError(type(inner))
            warnings.warn(
                f"RetainingSaver: {type(inner).__qualname__} is not a supported saver; "
                "it is passed through with cleanup disabled",
                stacklevel=2,
            )

    @property
    def cleanup_enabled(self) -> bool:
        """Whether this wrapper may ever delete anything from `inner`."""
        return self.backend_name is not None
