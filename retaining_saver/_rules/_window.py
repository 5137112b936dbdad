"""What a plan over a window of the thread (`Lineage.window_start`) may judge. No I/O.

A window holds every checkpoint at or above its start, so each one's children, but
not what the oldest ones rest on. One uncapped plan over the whole thread lets the
history rules judge everything that descends from the root namespace's line, and
every subgraph namespace with the root checkpoints it names; a window sees only
part of that. So:

- a window that holds a subgraph checkpoint is not judged at all (`unjudged`):
  whether a subgraph namespace goes with its root checkpoints depends on which of
  them it names, below the window too, and on what earlier passes deleted; the
  pass reads a wider window, up to the whole thread. Nor is one that holds a
  checkpoint written before format 4, whose pending sends a graft onto the
  window's edge would judge on other writes than the whole thread's plan does;
- in a window without one, a root-namespace checkpoint the history rules did not
  judge (it descends from the line below the window) stays as `WINDOW_EDGE`: no
  other rule takes what the whole thread's history rules would judge;
- the line's checkpoints that rest on rows below the window stay (`_history`), and
  a stretch above one is grafted onto it, so it keeps a child.

Deletions a window plans are then ones the whole thread's plan makes, and a later
pass over a wider window, or the whole thread, does the rest.

No checkpoint below a window references a blob its plan frees: a version a deleted
checkpoint holds and that was written below the window is held, unchanged, by every
checkpoint on the way up to it, so by the window's edge checkpoint on that way, which
stays; the plan frees only what no checkpoint it keeps holds. So the blob sweep looks
only at the window's rows and newer (`Plan.window_start`), not at the whole thread.

Delta channels are told from the metadata of the checkpoints in the window: LangGraph
names a DeltaChannel at every checkpoint that does not store its value, so a
checkpoint whose value is rebuilt from ancestors names the channel itself.
"""

from __future__ import annotations

from retaining_saver._rules._leaf import ROOT_NAMESPACE
from retaining_saver._rules._lineage import Lineage, NodeKey


def unjudged(lineage: Lineage) -> bool:
    """Whether `lineage` is a window that holds a subgraph checkpoint, or one written
    before format 4: nothing in it is judged (see the module docstring)."""
    return lineage.window_start is not None and any(
        key[0] != ROOT_NAMESPACE or node.is_pre_v4 for key, node in lineage.nodes.items()
    )


def beyond_the_window(lineage: Lineage, judged: set[NodeKey], taken: set[NodeKey]) -> set[NodeKey]:
    """What a window's other rules leave alone: the root-namespace checkpoints the
    history rules did not judge (`judged`: their scope), `taken` (trailing leaves
    already planned) aside. Nothing for a whole thread."""
    if lineage.window_start is None:
        return set()
    left = judged | taken
    return {key for key in lineage.nodes if key[0] == ROOT_NAMESPACE and key not in left}
