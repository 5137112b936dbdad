"""The retention rules: which checkpoints of a thread may go, and why. No I/O.

Everything that decides a deletion lives in this package: the values the rules
read and produce (`_lineage`: nodes, plans, reasons, protections), what they may
delete (`_policy`, and `_idle_policy` for whole threads), and the decisions, as
functions of a thread's lineage: `_leaf` (one checkpoint and its parent:
markers, clones, leaves, and what a step proved), `_plan` (a thread's plan),
`_history` (the history rules), `_cap` (how `max_delete_per_run` bounds them),
`_reads` (what a checkpoint they keep reads from its ancestors), `_runs` (the
runs, steps, DeltaChannel walks and subgraph namespaces those rules read),
`_runs_removal` (what `delete_for_runs` removes) and `_idle` (which whole
threads an `IdleThreadPolicy` expires: idle by their time-ordered ids, not
waiting on a resume, not vetoed). `_legend` holds one line per reason and
protection (`explain`), which the command line's legend and `docs/rules.md`
(anchored by value) use. This page is their table of contents.

What each deletion re-checks in its transaction is one table of named checks,
`PRECONDITIONS` (`_checks`, which renders it; a whole thread's deletion by the
idle-thread sweep, `_thread_checks`): the verdicts below run its
predicates, and each guard clause of a statement that deletes names the check
it enforces (tests/engine/test_preconditions.py holds them to the table).
`_recheck` judges a plan's steps, and admission's take, on the rows a backend
reads in the deleting transaction.

Backends load a `Lineage` and carry out the `Plan` made from it;
`RetainingSaver`'s admission cleanup asks `leaf_skip` about the head it read,
then `leaf_verdict` about the leaf and parent rows it read by primary key
(through `_recheck.LeafTake`). Nothing else decides: inside the deleting
transaction, backends read the facts `_recheck` names and carry out what it
answers, or guard each clause of a statement by a named check. Postgres also
judges a trailing leaf inside the statement that reads the head
(`ADMIT_AND_READ_SQL`), by this module's marker bound as data (`MarkerShape`),
and in the one that takes a leaf judged here (`RECLAIM_LEAF_SQL`, asking
`LeafTake.untaken` why when it took nothing); tests/admission/test_reclaim_guard.py
holds both to `leaf_verdict`.

| Shape                        | Default   | Deleted when                                  |
|------------------------------|-----------|-----------------------------------------------|
| trailing duration-only leaf  | on        | head of its namespace, marker shape, clone of |
|                              |           | its parent, owns no writes                    |
| superseded sibling subtree   | opt-in    | whole subtree off the protected chain, forked |
|                              |           | off a present checkpoint, older than the TTL  |
| duration-only chain link     | opt-in    | clone of its parent, owns no writes; its      |
|                              | (graft)   | children are re-parented to its parent        |
| beyond the history horizon   | opt-in    | on the root namespace's head line, older than |
|                              | (root,    | its newest `history_keep_runs` runs (0: older |
|                              | graft)    | than the head; an interrupted head's run, the |
|                              |           | head owning writes, is kept under every N),   |
|                              |           | or in a branch forked there;                  |
|                              |           | under `keep_latest`, every checkpoint of a    |
|                              |           | namespace but its head; a subgraph checkpoint |
|                              |           | whose root checkpoint goes (below). Older     |
|                              |           | than `history_min_age`. The oldest kept       |
|                              |           | checkpoint becomes a root (parent None)       |
| compacted super-step         | opt-in    | a `loop` checkpoint of a head-line run        |
|                              | (graft)   | strictly between the run's first and last     |
|                              |           | `loop` checkpoint; older than                 |
|                              |           | `history_min_age`; the next kept checkpoint   |
|                              |           | is re-parented onto the previous kept one     |
| removed run                  | on call   | `delete_for_runs`: metadata `run_id` names a  |
|                              | (graft,   | run given, or a subgraph call under such a    |
|                              | root)     | root checkpoint; what a kept checkpoint's     |
|                              |           | DeltaChannel walk reads stays. Kept children  |
|                              |           | go onto the nearest kept ancestor (`_runs_    |
|                              |           | removal`)                                     |

A run is the checkpoints of a line from a `source == "input"` checkpoint up to
the last before the next input checkpoint (what precedes the first input is a
run of its own).

Subgraph namespaces go with the root's runs: a subgraph checkpoint names the
root checkpoint it was written under (`parents[""]`) and goes only when that
one goes, unless a protection keeps it. A subgraph call's namespace
(`node:task_id`) goes whole or stays; a `checkpointer=True` subgraph's (no task
id) keeps its head, the subgraph's memory, and for every root checkpoint kept
the checkpoint a fork from it loads as that memory (`fork-memory`: LangGraph's
replay loads the subgraph's latest checkpoint before the fork point). A
namespace that does not name its roots is left alone (under `keep_latest`, it
keeps its latest). Only subgraph checkpoints that stay whatever the runs do (a
head, a protection other than `fork-memory`) keep the root checkpoints they name
(`subgraph-parent`); `keep_latest`, as upstream's prune, keeps none, and keeps
no fork memory either.

DeltaChannels (named in `counters_since_delta_snapshot` metadata) rebuild a
value from ancestors' writes back to the nearest checkpoint that stores it
(`_runs.walk`). No rule cuts such a walk of a checkpoint it keeps: the walk stays
(`delta-history`), or, at a root the history rules make in the root
namespace and for the channels `RetentionPolicy.delta_graph` declares, the
value is stored whole there first (`Plan.materialise`). A thread marked by
LangGraph.js (`delta_writes_versioned`, channels unnamed) keeps all of it.

| Protection             | Meaning                                                        |
|------------------------|----------------------------------------------------------------|
| head                   | latest checkpoint of a namespace, after its trailing leaves    |
| ancestor               | on the parent chain of a protected checkpoint                  |
| explicit               | named in `protect_checkpoint_ids`                              |
| pending-writes         | owns writes and has no child: live, uncommitted state          |
| subgraph-parent        | named as `parents[""]` by a checkpoint of another namespace    |
| duration-link          | duration-only checkpoint a later run forked from (no graft)    |
| link-on-writes         | duration link whose parent owns writes: a graft would put      |
|                        | them on its children's delta-history walk, changing its value  |
| too-young              | superseded subtree whose newest checkpoint is inside the TTL   |
| fork-point-missing     | off-chain subtree whose fork point row is missing: unproven    |
| not-enabled            | deletable shape whose rule the policy leaves off               |
| capped                 | deletable, deferred by `max_delete_per_run`. A history unit    |
|                        | (a removed stretch with its graft or root, and the subgraph    |
|                        | checkpoints that go with it) that does not fit goes newest     |
|                        | part first: its kept child is grafted onto the newest          |
|                        | checkpoint of the stretch that stays (`_cap`), so every pass   |
|                        | deletes up to the cap and repeated passes reach the uncapped   |
|                        | result. A root checkpoint goes in one pass with the subgraph   |
|                        | checkpoints written under it: a cap below that many, or where  |
|                        | no part leaves the rest on its parents, defers the unit whole  |
| parent-of-young        | parent of a checkpoint inside `history_min_age`: a young       |
|                        | checkpoint's parent link is never rewritten                    |
| delta-history          | on a kept checkpoint's walk back to a delta channel's stored   |
|                        | value: the value there is rebuilt from its writes              |
| fork-point             | super-step with several children: branches keep their base     |
| keep-step              | super-step the policy's `keep_step` keeps                      |
| live-run               | super-step of the head's run while the head owns writes        |
| pre-v4-sends           | parent of a kept checkpoint older than format 4, which reads   |
|                        | its pending sends from this one's writes (history rules, run   |
|                        | removal)                                                       |
| fork-memory            | a `checkpointer=True` subgraph's latest checkpoint before a    |
|                        | kept root checkpoint (before its parent, for an `update` or    |
|                        | `fork` one): a fork from that one loads it as the subgraph's   |
|                        | memory; and the parent of a kept `update`/`fork` checkpoint    |
|                        | (a duration link too), which bounds that read (not under       |
|                        | `keep_latest`, which keeps only heads, as upstream's prune)    |
| window-edge            | a root-namespace checkpoint whose parent lies below the window |
|                        | of newest checkpoints an admission's pass loaded               |
|                        | (`Lineage.window_start`), or that descends from the line       |
|                        | there: it and what it rests on stay; a stretch above it is     |
|                        | grafted onto it (`_window`)                                    |

Under the history rules, too-young also names a checkpoint younger than
`history_min_age`, explicit keeps its whole ancestor chain, and any kept
checkpoint off the head line keeps its chain down to the line (a branch stays
a branch). Pending-writes and subgraph-parent keep the checkpoint itself,
which a graft or root may then re-parent.

A checkpoint written before format 4 (`v` < 4) keeps its parent under the
history rules and under a run removal (`pre-v4-sends`), unless neither that
parent nor the one the checkpoint would get (none, for a root) owns writes: the
Postgres saver reads such a checkpoint's pending sends from its parent's
`__pregel_tasks` writes.
Duration-link grafts need nothing more (a new parent owns no writes, as a link
owns none).

A missing ancestor row ends a walk: it never raises, and whatever it cannot
prove unreachable stays.
"""

from __future__ import annotations

from retaining_saver._rules._check import Check as Check

# The rules' names for the rest of the package, re-exported as `X as X` (explicit for
# mypy): `_rules` is internal, so it has no `__all__`.
from retaining_saver._rules._checks import PRECONDITIONS as PRECONDITIONS
from retaining_saver._rules._checks import DeletionFacts as DeletionFacts
from retaining_saver._rules._checks import DeletionKind as DeletionKind
from retaining_saver._rules._checks import check_deletion as check_deletion
from retaining_saver._rules._checks import deletion_holds as deletion_holds
from retaining_saver._rules._checks import kind_of as kind_of
from retaining_saver._rules._checks import leaf_skip as leaf_skip
from retaining_saver._rules._checks import leaf_verdict as leaf_verdict
from retaining_saver._rules._checks import parent_skip as parent_skip
from retaining_saver._rules._checks import preconditions_table as preconditions_table
from retaining_saver._rules._checks import untaken_skip as untaken_skip
from retaining_saver._rules._leaf import DELTA_UNNAMED_KEY as DELTA_UNNAMED_KEY
from retaining_saver._rules._leaf import DURATION_MARKER as DURATION_MARKER
from retaining_saver._rules._leaf import MAX_STACKED_LEAVES as MAX_STACKED_LEAVES
from retaining_saver._rules._leaf import RUN_HISTORY_KEYS as RUN_HISTORY_KEYS
from retaining_saver._rules._leaf import MarkerShape as MarkerShape
from retaining_saver._rules._leaf import graft_holds as graft_holds
from retaining_saver._rules._leaf import has_marker as has_marker
from retaining_saver._rules._leaf import is_clone as is_clone
from retaining_saver._rules._leaf import is_duration_marker as is_duration_marker
from retaining_saver._rules._leaf import is_duration_metadata as is_duration_metadata
from retaining_saver._rules._leaf import leaf_deletion as leaf_deletion
from retaining_saver._rules._leaf import marker_shape as marker_shape
from retaining_saver._rules._leaf import may_have_marker as may_have_marker
from retaining_saver._rules._leaf import root_holds as root_holds
from retaining_saver._rules._lineage import DELTA_METADATA_KEY as DELTA_METADATA_KEY
from retaining_saver._rules._lineage import BlobKey as BlobKey
from retaining_saver._rules._lineage import CheckpointNode as CheckpointNode
from retaining_saver._rules._lineage import Deletion as Deletion
from retaining_saver._rules._lineage import Graft as Graft
from retaining_saver._rules._lineage import LeafFacts as LeafFacts
from retaining_saver._rules._lineage import Lineage as Lineage
from retaining_saver._rules._lineage import Materialise as Materialise
from retaining_saver._rules._lineage import NodeKey as NodeKey
from retaining_saver._rules._lineage import Plan as Plan
from retaining_saver._rules._lineage import Protection as Protection
from retaining_saver._rules._lineage import Reason as Reason
from retaining_saver._rules._lineage import Root as Root
from retaining_saver._rules._lineage import Skip as Skip
from retaining_saver._rules._plan import plan_retention as plan_retention
from retaining_saver._rules._policy import LeafPredicate as LeafPredicate
from retaining_saver._rules._policy import RetentionPolicy as RetentionPolicy
from retaining_saver._rules._resumed import Restoring as Restoring
from retaining_saver._rules._resumed import Resumption as Resumption
from retaining_saver._rules._resumed import WriteKey as WriteKey
from retaining_saver._rules._resumed import WriteRow as WriteRow
from retaining_saver._rules._resumed import later_writes as later_writes
from retaining_saver._rules._resumed import restorations as restorations
from retaining_saver._rules._resumed import resumed_points as resumed_points
from retaining_saver._rules._runs import compactable_steps as compactable_steps
from retaining_saver._rules._runs import delta_channels as delta_channels
from retaining_saver._rules._runs import split_runs as split_runs
from retaining_saver._rules._runs import uses_delta_channels as uses_delta_channels
from retaining_saver._rules._runs_removal import RUN_ID_KEY as RUN_ID_KEY
from retaining_saver._rules._runs_removal import plan_run_removal as plan_run_removal
from retaining_saver._rules._runs_removal import run_of as run_of
