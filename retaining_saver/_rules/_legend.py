"""One line per reason and protection: what each value a plan or report names means.

Data, in one place, for everything that explains a plan: the command line's
legend (`plan --explain`), `explain()`, and the docs, whose anchors in
`docs/rules.md` are the values themselves (`docs/rules.md#too-young`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from retaining_saver._rules._lineage import Protection, Reason

RULES_DOC = "docs/rules.md"

REASONS: Mapping[Reason, str] = MappingProxyType(
    {
        Reason.TRAILING_DURATION_LEAF: (
            "the newest checkpoint of its namespace only stamps a run's duration: a clone "
            "of its parent that owns no writes"
        ),
        Reason.SUPERSEDED_BRANCH: (
            "in a sibling branch forked off the kept line (a regenerated answer's old "
            "branch), older than the TTL (--min-age)"
        ),
        Reason.GRAFTED_DURATION_LINK: (
            "a duration stamp a later run forked from; its children are re-parented onto its parent"
        ),
        Reason.BEYOND_HORIZON: (
            "older than the newest --keep-runs runs (prune: not its namespace's latest), "
            "and than the TTL (--min-age)"
        ),
        Reason.COMPACTED_STEP: (
            "a super-step between a finished run's first and last one (--compact-steps), "
            "older than the TTL (--min-age)"
        ),
        Reason.RUN_REMOVED: (
            "written by a run delete_for_runs removes; its children are re-parented "
            "onto the nearest surviving ancestor"
        ),
    }
)

PROTECTIONS: Mapping[Protection, str] = MappingProxyType(
    {
        Protection.HEAD: "the latest checkpoint of its namespace: what the thread resumes from",
        Protection.ANCESTOR: "on the parent chain of a kept checkpoint",
        Protection.EXPLICIT: "named in protect_checkpoint_ids",
        Protection.PENDING_WRITES: "owns writes and has no child: live, uncommitted state",
        Protection.SUBGRAPH_PARENT: "a subgraph checkpoint that stays names it as its parent",
        Protection.DURATION_LINK: (
            "a duration stamp a later run forked from; --graft-links would remove it"
        ),
        Protection.LINK_ON_WRITES: (
            "a duration link whose parent owns writes: a graft would change a value rebuilt "
            "from them"
        ),
        Protection.TOO_YOUNG: (
            "younger than the TTL (--min-age), or in a branch that is: a client may hold it"
        ),
        Protection.FORK_POINT_MISSING: "its branch's fork point row is missing: unproven",
        Protection.NOT_ENABLED: "deletable, but by a rule this policy leaves off",
        Protection.CAPPED: "deletable, deferred to a later pass by --max-delete",
        Protection.YOUNG_PARENT: "parent of a checkpoint younger than the TTL (--min-age)",
        Protection.DELTA_HISTORY: (
            "a kept checkpoint's delta channel value is rebuilt from its writes"
        ),
        Protection.FORK_POINT: "a super-step several branches start from",
        Protection.KEEP_STEP: "a super-step the policy's keep_step keeps",
        Protection.LIVE_RUN: "a super-step of the head's run while the head owns writes",
        Protection.PRE_V4_SENDS: (
            "parent of a kept pre-format-4 checkpoint, which reads its sends from this one"
        ),
        Protection.FORK_MEMORY: (
            "a checkpointer=True subgraph's memory that a fork from a kept turn loads"
        ),
        Protection.WINDOW_EDGE: (
            "an admission pass read only the newest checkpoints, and this one rests on what "
            "it did not"
        ),
    }
)

OUTCOMES: Mapping[str, str] = MappingProxyType(
    {
        "dropped": "planned, but the thread changed before the delete: the next pass judges it",
        "deferred": "deletable, left for a later pass by --max-delete",
    }
)
"""What a pass's report lists beside deletions and protections."""


_EVERY: Mapping[str, str] = {
    str(value): line for table in (REASONS, PROTECTIONS, OUTCOMES) for value, line in table.items()
}


def explain(value: Reason | Protection | str) -> str:
    """The one-line meaning of a reason, protection or report outcome (`"deferred"`).

    Raises:
        KeyError: If `value` is none of them.
    """
    try:
        return _EVERY[str(value)]
    except KeyError:
        raise KeyError(
            f"no explanation for {value!r}: not a Reason, Protection or outcome"
        ) from None


def doc_anchor(value: Reason | Protection | str) -> str:
    """Where `docs/rules.md` explains `value` at length."""
    return f"{RULES_DOC}#{value}"
