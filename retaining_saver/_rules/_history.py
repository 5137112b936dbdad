"""The history rules: the horizon, step compaction and keep_latest, over each namespace;
subgraph namespaces with their root runs; DeltaChannel walks. No I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from retaining_saver._rules._leaf import DELTA_UNNAMED_KEY, ROOT_NAMESPACE, _parse_ts
from retaining_saver._rules._lineage import (
    CheckpointNode,
    Deletion,
    Graft,
    HistoryUnit,
    Lineage,
    NodeKey,
    Protection,
    Reason,
    Root,
)
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._reads import _AncestorReads
from retaining_saver._rules._runs import (
    compactable_steps,
    delta_channels,
    is_persistent,
    parent_key,
    parents_named,
    post_order,
    root_of,
    split_runs,
)


class _History(_AncestorReads):
    """The history rules (horizon, step compaction, keep_latest) over each namespace.

    Planned once, on construction, from the lineage and what the planner knows of
    it: `removed` is what the rules delete, `scope` every checkpoint they judged,
    `materialise` the delta values stored whole at new roots, and `kept` the
    planner's `kept` with the protections the rules give and without what they
    remove: values the planner takes, it is never written to.

    The root namespace is judged by its runs (horizon, compaction), or keeps
    only its head (keep_latest). A subgraph namespace whose checkpoints all
    name their root checkpoint (`parents[""]`) goes with the root's runs: a
    checkpoint goes when its root checkpoint goes, except the head of a
    persistent namespace (a `checkpointer=True` subgraph's memory, with no
    task id in its name), and it stays when its root checkpoint stays. Under
    keep_latest every namespace keeps only its head instead; otherwise a
    namespace that does not name its roots is left alone. A namespace with a
    missing row is left alone: nothing there is proven. A window is judged as far
    as it reaches (`_window`): what rests on rows below it stays (`WINDOW_EDGE`).
    """

    def __init__(
        self,
        lineage: Lineage,
        policy: RetentionPolicy,
        now: datetime,
        *,
        children: Mapping[NodeKey, list[NodeKey]],
        kept: Mapping[NodeKey, Protection],
        taken: set[NodeKey],
        referenced: set[NodeKey],
        newest_missing: Mapping[str, str],
        namer_roots: frozenset[NodeKey] = frozenset(),
    ) -> None:
        self.lineage, self.policy, self.now = lineage, policy, now
        self.children = children
        self.kept = dict(kept)
        self.taken = taken
        self.newest_missing = newest_missing
        self.scope: set[NodeKey] = set()
        self.removed: set[NodeKey] = set()
        self.reasons: dict[NodeKey, Reason] = {}
        self.lines: dict[str, list[NodeKey]] = {}
        self.units: list[HistoryUnit] = []
        self.materialise: dict[NodeKey, tuple[str, ...]] = {}
        self.delta = delta_channels(self.lineage)
        self.pre_v4 = any(n.is_pre_v4 for n in self.lineage.nodes.values())
        self.unnamed_delta = any(
            DELTA_UNNAMED_KEY in n.metadata for n in self.lineage.nodes.values()
        )
        # What forks from kept root checkpoints load as `checkpointer=True` subgraph
        # memory: known once the root namespace is planned.
        self.fork_memory: set[NodeKey] = set()
        # keep_latest included: a kept root checkpoint (the head, an ancestor of kept
        # pending writes) forks as before only on the memory it forked on. A window
        # cannot tell whether such memory lies below it: it assumes so.
        windowed = lineage.window_start is not None
        self.replays_memory = windowed or any(
            ns != ROOT_NAMESPACE and is_persistent(ns) for ns, _ in self.lineage.nodes
        )
        # Root checkpoints a kept subgraph checkpoint names: kept as its parent. Under
        # keep_latest none are, as upstream's prune keeps none.
        self.named_parents: set[NodeKey] = set() if self.policy.keep_latest else set(referenced)
        # Root checkpoints of subgraph checkpoints kept as a DeltaChannel's last namer:
        # given (the planner's last round), and found (this round's, to plan again).
        self.given_namer_roots = namer_roots
        self.namer_roots: set[NodeKey] = set()
        if self.policy.history_rules:
            self._plan_all()

    def _plan_all(self) -> None:
        heads = self._heads()
        others = sorted(ns for ns in heads if ns != ROOT_NAMESPACE)
        if self.policy.keep_latest:
            if ROOT_NAMESPACE in heads:
                self._plan(heads[ROOT_NAMESPACE], self._all_but_head)
            self.fork_memory = self._fork_memory(self._kept_roots(), others)
            root_units = self.units
            for ns in others:
                gone = not is_persistent(ns) and self._names_its_roots(ns)
                self.units = []
                self._plan(heads[ns], self._with_root_runs if gone else self._all_but_head)
                for unit in self.units:
                    root_units = self._tied(root_units, unit) if gone else [*root_units, unit]
            self.units = root_units
            return
        rooted = [ns for ns in others if self._names_its_roots(ns)]
        # Only the subgraph checkpoints that stay whatever the root's runs do keep theirs:
        # in a namespace left alone, all of them.
        subgraphs = {k[0] for k in self.lineage.nodes} - {ROOT_NAMESPACE}
        self.named_parents = {
            parent
            for ns in sorted(subgraphs)
            for key in (self._sticky(ns, heads[ns]) if ns in rooted else self._in_ns(ns))
            for parent in parents_named(self.lineage.nodes[key])
        } | self.given_namer_roots
        if ROOT_NAMESPACE in heads:
            self._plan(heads[ROOT_NAMESPACE], self._by_runs)
        self.fork_memory = self._fork_memory(self._kept_roots(), rooted)
        root_units = self.units
        for ns in rooted:
            self.units = []
            self._plan(heads[ns], self._with_root_runs)
            for unit in self.units:
                root_units = self._tied(root_units, unit)
        self.units = root_units

    def _kept_roots(self) -> list[NodeKey]:
        """The root namespace's checkpoints the plan keeps (once it is planned)."""
        gone = self.removed | self.taken
        return [k for k in self.lineage.nodes if k[0] == ROOT_NAMESPACE and k not in gone]

    def _heads(self) -> dict[str, NodeKey]:
        """Each namespace's head as `_stamp_stacks` left it, where no row is missing."""
        heads: dict[str, NodeKey] = {}
        for key in self.lineage.nodes:
            if key not in self.taken and key > heads.get(key[0], ("", "")):
                heads[key[0]] = key
        return {ns: k for ns, k in heads.items() if ns not in self.newest_missing}

    def _in_ns(self, ns: str) -> list[NodeKey]:
        return [k for k in self.lineage.nodes if k[0] == ns]

    def _names_its_roots(self, ns: str) -> bool:
        """Whether every checkpoint of `ns` names its root checkpoint; in a task's
        namespace, all the same one (the checkpoint the task ran from)."""
        roots = {root_of(self.lineage.nodes[k]) for k in self._in_ns(ns)}
        return None not in roots and (is_persistent(ns) or len(roots) == 1)

    # Candidates for removal in the namespace being planned, by key

    def _all_but_head(self, head: NodeKey, line: Sequence[NodeKey]) -> dict[NodeKey, Reason]:
        return dict.fromkeys(self.ns_scope - {head}, Reason.BEYOND_HORIZON)

    def _by_runs(self, head: NodeKey, line: Sequence[NodeKey]) -> dict[NodeKey, Reason]:
        runs = split_runs([self.lineage.nodes[k] for k in line])
        removal: dict[NodeKey, Reason] = {}
        if self.policy.history_keep_runs is not None:
            removal.update(dict.fromkeys(self._beyond_horizon(runs), Reason.BEYOND_HORIZON))
        if self.policy.compact_steps:
            for key in self._compacted_steps(runs):
                removal.setdefault(key, Reason.COMPACTED_STEP)
        return removal

    def _with_root_runs(self, head: NodeKey, line: Sequence[NodeKey]) -> dict[NodeKey, Reason]:
        spare = {head} if is_persistent(head[0]) else set()
        removal = {
            key: Reason.BEYOND_HORIZON
            for key in self.ns_scope - spare
            if (ROOT_NAMESPACE, root_of(self.lineage.nodes[key])) in self.removed
        }
        if spare or len(removal) == len(self.ns_scope):
            return removal
        # A task's namespace holds that task's state alone: it goes whole, or it stays
        # (under keep_latest, as its latest checkpoint).
        return self._all_but_head(head, line) if self.policy.keep_latest else {}

    def _sticky(self, ns: str, head: NodeKey) -> set[NodeKey]:
        """What of a rooted subgraph namespace stays whatever its root checkpoints do."""
        self._enter(head)
        everything = dict.fromkeys(self.ns_scope, Reason.BEYOND_HORIZON)
        rescued = self._rescued(everything)
        if is_persistent(ns):
            rescued[head] = Protection.HEAD
        removed = {k: r for k, r in everything.items() if k not in rescued}
        # Whether a checkpoint here is a DeltaChannel's last namer depends on what the
        # root's plan keeps: judged when this namespace is planned (`namer_roots`).
        removed, _ = self._keep_reads([], removed, rescued, namers=False)
        return self.ns_scope - removed.keys()

    # Planning one namespace

    def _enter(self, head: NodeKey) -> list[NodeKey]:
        line = self._line(head)
        self.on_line = set(line)
        self.ns_scope = self._descendants(line)
        return line

    def _plan(self, head: NodeKey, candidates: Callable[..., dict[NodeKey, Reason]]) -> None:
        line = self._enter(head)
        self.scope |= self.ns_scope
        self.spared: dict[NodeKey, Protection] = {}
        removal = candidates(head, line)
        rescued = self._rescued(removal)
        rescued.update({k: p for k, p in self.spared.items() if k not in removal})
        if self.unnamed_delta:
            rescued.update(dict.fromkeys(removal, Protection.DELTA_HISTORY))
        removed = {k: r for k, r in removal.items() if k not in rescued}
        removed, materialise = self._keep_reads(line, removed, rescued)
        self.materialise.update(materialise)
        if removed and line[-1] in removed and len(removed) < len(self.ns_scope):
            removed = {}  # a task's namespace, part of which a protection keeps: all stays
        for key, protection in rescued.items():
            if self.kept.get(key) in (None, Protection.ANCESTOR):
                self.kept[key] = protection
        for key in removed:
            self.kept.pop(key, None)
        self.removed |= removed.keys()
        self.reasons.update(removed)
        self.lines[head[0]] = line
        self.units += self._units(line, removed)

    def _line(self, head: NodeKey) -> list[NodeKey]:
        """The head's chain, root first (it ends at a root: no row is missing)."""
        chain = [head]
        parent = self.lineage.parent(self.lineage.nodes[head])
        while parent is not None:
            chain.append((parent.checkpoint_ns, parent.checkpoint_id))
            parent = self.lineage.parent(parent)
        return chain[::-1]

    def _descendants(self, tops: Iterable[NodeKey]) -> set[NodeKey]:
        found: set[NodeKey] = set()
        taken, children = self.taken, self.children
        todo = [k for k in tops if k not in taken]
        while todo:
            if (key := todo.pop()) not in found:
                found.add(key)
                todo += [k for k in children.get(key, ()) if k not in taken]
        return found

    def _beyond_horizon(self, runs: Sequence[Sequence[CheckpointNode]]) -> set[NodeKey]:
        # An interrupted head (it owns writes: an interrupt, a resume) makes its run live:
        # kept whole under every horizon, so the turn regenerates from its input.
        keep = max(self.policy.history_keep_runs or 0, 1 if self._live(runs) else 0)
        newest = [runs[-1][-1]] if keep == 0 else [n for run in runs[-keep:] for n in run]
        return self.ns_scope - self._descendants((n.checkpoint_ns, n.checkpoint_id) for n in newest)

    def _live(self, runs: Sequence[Sequence[CheckpointNode]]) -> bool:
        """Whether the head's run is live: the head owns writes (an interrupt waiting,
        a resume given, a failed task's siblings' results)."""
        return bool(runs) and runs[-1][-1].write_count > 0

    def _compacted_steps(self, runs: Sequence[Sequence[CheckpointNode]]) -> Iterable[NodeKey]:
        live = self._live(runs)
        keep_step = self.policy.keep_step
        for run in runs:
            for node in compactable_steps(run):
                key = (node.checkpoint_ns, node.checkpoint_id)
                if live and run is runs[-1]:
                    self.spared[key] = Protection.LIVE_RUN
                elif len(self.children.get(key, [])) > 1:
                    self.spared[key] = Protection.FORK_POINT
                elif keep_step is not None and keep_step(node):
                    self.spared[key] = Protection.KEEP_STEP
                else:
                    yield key

    def _rescued(self, removal: Mapping[NodeKey, Reason]) -> dict[NodeKey, Protection]:
        """What the protections keep of `removal`, each with the protection that keeps it."""
        rescued: dict[NodeKey, Protection] = {}

        def keep(key: NodeKey | None, protection: Protection, *, to_root: bool = False) -> None:
            while key is not None and key in self.lineage.nodes:
                if key in removal:
                    rescued.setdefault(key, protection)
                if not to_root and key in self.on_line:
                    return
                protection, key = Protection.ANCESTOR, parent_key(self.lineage, key)

        for key in sorted(self.ns_scope):
            node = self.lineage.nodes[key]
            up = parent_key(self.lineage, key)
            if up in removal and key not in removal and key not in self.on_line:
                # A kept branch rests on its parent: in a subgraph's namespace, one written
                # under a kept run can continue memory written under a removed one.
                keep(up, Protection.ANCESTOR)
            if self.lineage.below_window(node):
                keep(key, Protection.WINDOW_EDGE)
            if node.checkpoint_id in self.policy.protect_checkpoint_ids:
                keep(key, Protection.EXPLICIT, to_root=True)
            if key in self.named_parents:
                keep(key, Protection.SUBGRAPH_PARENT)
            if key in self.fork_memory:
                keep(key, Protection.FORK_MEMORY)
            if node.write_count and not self.children.get(key):
                keep(key, Protection.PENDING_WRITES)
            if self._young(node):
                keep(key, Protection.TOO_YOUNG)
                keep(parent_key(self.lineage, key), Protection.YOUNG_PARENT)
        return rescued

    def _young(self, node: CheckpointNode) -> bool:
        """Inside `history_min_age`, or of unknown age."""
        stamp = _parse_ts(node.ts)
        min_age = self.policy.history_min_age or timedelta(0)
        return stamp is None or self.now - stamp < min_age

    def _units(
        self, line: Sequence[NodeKey], removed: Mapping[NodeKey, Reason]
    ) -> list[HistoryUnit]:
        """Each removed stretch of the line with its graft or root; then lone removed branches.

        A namespace removed whole (its head too) is one unit, children first.
        """
        if line[-1] in removed:
            return [HistoryUnit(self._branch(line[0], removed))]
        units: list[HistoryUnit] = []
        below, stretch = line[-1], list[NodeKey]()
        for key in reversed(line[:-1]):
            if key in removed:
                stretch.append(key)
                continue
            if stretch:
                units.append(self._stretch(below, stretch, key, removed))
            below, stretch = key, []
        if stretch:
            units.append(self._stretch(below, stretch, None, removed))
        for top in sorted(
            k
            for k in removed
            if k not in self.on_line and parent_key(self.lineage, k) not in removed
        ):
            units.append(HistoryUnit(self._branch(top, removed)))
        return units

    def _stretch(
        self,
        child: NodeKey,
        stretch: Sequence[NodeKey],
        above: NodeKey | None,
        removed: Mapping[NodeKey, Reason],
    ) -> HistoryUnit:
        branches = [
            d
            for key in stretch
            for kid in self.children.get(key, [])
            if kid not in self.on_line
            for d in self._branch(kid, removed)
        ]
        line = [self._deletion(k, removed[k]) for k in stretch]
        reasons = {removed[k] for k in stretch}
        reason = (
            Reason.COMPACTED_STEP if reasons == {Reason.COMPACTED_STEP} else Reason.BEYOND_HORIZON
        )
        via = tuple(k[1] for k in stretch)
        if above is None:
            return HistoryUnit(branches + line, roots=[Root(child[0], child[1], via, reason)])
        graft = Graft(child[0], child[1], via, above[1], reason)
        return HistoryUnit(branches + line, grafts=[graft])

    def _branch(self, top: NodeKey, removed: Mapping[NodeKey, Reason]) -> list[Deletion]:
        order = post_order(self.children, top, set(removed))
        return [self._deletion(k, removed[k]) for k in order]

    def _deletion(self, key: NodeKey, reason: Reason) -> Deletion:
        node = self.lineage.nodes[key]
        # Their writes were consumed: the next checkpoint already holds what they wrote.
        return Deletion(
            key[0], key[1], node.parent_id, reason, writes_consumed=node.write_count > 0
        )

    def _tied(self, units: list[HistoryUnit], unit: HistoryUnit) -> list[HistoryUnit]:
        """`units`, with a subgraph namespace's `unit` and every unit removing the root
        checkpoints its checkpoints were written under made one: capped, they go
        together or wait together."""
        nodes = self.lineage.nodes
        roots = {root_of(nodes[(d.checkpoint_ns, d.checkpoint_id)]) for d in unit.deletions}
        ties = [u for u in units if any(d.checkpoint_id in roots for d in u.deletions)]
        merged = HistoryUnit([])
        for tie in [*ties, unit]:
            merged.absorb(tie)
        rest = [u for u in units if all(u is not t for t in ties)]
        at = min((i for i, u in enumerate(units) if any(u is t for t in ties)), default=len(units))
        before = sum(1 for u in units[:at] if all(u is not t for t in ties))
        return [*rest[:before], merged, *rest[before:]]
