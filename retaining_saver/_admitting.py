"""Admission cleanup as the saver runs it: behind a failsafe, then remembered, then counted.

The flows of `_admission` decide nothing of the saver's own state; here they
run behind `_failsafe`, which turns any failure into a logged `FAILED` result
(a run never fails for cleanup), then the history pass (`_bounding`). Under
the thread's lock what was reclaimed is remembered (`_remember_reclaimed`);
after it, counted (`_account`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from retaining_saver import _admission, _run_reads
from retaining_saver._accounting import Accounts
from retaining_saver._admission import AdmissionResult, Admitted
from retaining_saver._effects import Flow, Lookup
from retaining_saver._reclaimed import ReclaimedIds
from retaining_saver._rules import MarkerShape, NodeKey, RetentionPolicy, Skip
from retaining_saver._stamps import OwnStamps
from retaining_saver.backends._base import Backend


class AdmittingMixin:
    """Admission flows behind the failsafe, and what the saver keeps of what they did."""

    # Set by `RetainingSaver.__init__`; the history pass is `BoundingMixin`'s.
    _backend: Backend | None
    policy: RetentionPolicy
    admission: Literal["auto", "explicit", "off"]
    _accounts: Accounts
    _stamps: OwnStamps | None
    _reclaimed: ReclaimedIds
    _one_round: MarkerShape | None

    _history_read: Callable[[RunnableConfig, Admitted], Flow[Admitted]]
    _bound_history: Callable[..., Flow[tuple[AdmissionResult, frozenset[NodeKey]]]]

    def _admission_read(
        self, thread_id: str, config: RunnableConfig, head: CheckpointTuple | None
    ) -> Flow[Admitted]:
        assert self._backend is not None  # _is_admission said so
        protected = _run_reads.run_selectors(config)
        flow = _admission.admit_read(
            thread_id, config, self._backend, self.policy, protected, head, self._one_round
        )
        admitted = yield from self._failsafe(thread_id, flow, config)
        return (yield from self._history_read(config, admitted))

    def _explicit(
        self,
        thread_id: str,
        config: RunnableConfig,
        protected: frozenset[str] = frozenset(),
    ) -> Flow[Admitted]:
        """Cleanup that looks the head up itself, without its values; `protected`: ids the
        run addresses, never reclaimed; then the history pass, if due."""
        if self._backend is None or self.admission == "off":
            return AdmissionResult(thread_id, (), Skip.CLEANUP_DISABLED), None
        if self._accounts.waiting():
            return AdmissionResult(thread_id, (), Skip.PERMISSION_DENIED), None
        flow = _admission.admit_explicit(thread_id, config, self._backend, self.policy, protected)
        result, _ = yield from self._failsafe(thread_id, flow, config, read=False)
        result, _ = yield from self._bound_history(config, result)
        return result, None

    def _failsafe(
        self, thread_id: str, flow: Flow[Admitted], config: RunnableConfig, *, read: bool = True
    ) -> Flow[Admitted]:
        """`flow`; if it fails, a logged `FAILED` result and the head as it is now.

        With `read`, the head is read through the saver for the run (a failure
        there is the bare read's own, and surfaces); else only its id is looked
        up, and a failure there leaves it None.
        """
        try:
            return (yield from flow)
        except Exception as error:
            assert self._backend is not None  # only an enabled backend cleans up
            problem = self._backend.permission_problem(error)
            skip = self._accounts.failure(thread_id, error, problem)
        if read:
            head = yield Lookup(config)
            head_id = head.checkpoint["id"] if head is not None else None
            return AdmissionResult(thread_id, (), skip, head_id), head
        assert self._backend is not None  # only an enabled backend admits
        try:
            node = yield from _admission.head_node(thread_id, config, self._backend)
        except Exception:
            node = None
        head_id = node.checkpoint_id if node is not None else None
        return AdmissionResult(thread_id, (), skip, head_id), None

    def _account(self, config: RunnableConfig, admitted: Admitted) -> Admitted:
        """Account for an admission, outside the thread's lock."""
        self._accounts.account(config.get("configurable", {}).get("checkpoint_ns", ""), admitted[0])
        return admitted

    def _remembering(self, config: RunnableConfig, flow: Flow[Admitted]) -> Flow[Admitted]:
        """`flow`, then, still under the thread's lock, what it reclaimed remembered."""
        return self._remember_reclaimed(config, (yield from flow))

    def _remember_reclaimed(self, config: RunnableConfig, admitted: Admitted) -> Admitted:
        """Remember, still under the thread's lock, that each reclaimed id now names the head:
        a write this process puts on one of them lands on its clone instead."""
        result = admitted[0]
        ns = config.get("configurable", {}).get("checkpoint_ns", "")
        for checkpoint_id in result.reclaimed:
            if self._stamps is not None:
                self._stamps.forget(result.thread_id, checkpoint_id)
            if result.head_id is not None:
                self._reclaimed.remember((result.thread_id, ns, checkpoint_id), result.head_id)
        return admitted
