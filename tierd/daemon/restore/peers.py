"""A restore's sources on other nodes: the holders of verified peer copies of the step's parts.

Each holder is one source (``peer:<holder>``) holding the files of the parts it keeps a
verified copy of. They are read nearest first: holders in this node's failure domain
(``fleet.failure_domain``) before the others (this node itself first: a copy of another
node's part may be in its own peer directory), each group in rendezvous order (the highest
``choose.score`` of the step and the holder first), and holders whose heartbeat is older than
``fleet.node_timeout`` last of all (a node the fleet calls silent is likely dead). A holder
that does not answer is passed over at the connect timeout (``backends.peer.fetch``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tierd.config import Config
from tierd.daemon.backends.base import Backend
from tierd.daemon.backends.peer.choose import PeerNode, score
from tierd.daemon.catalog.peer_reads import PeerHolding
from tierd.daemon.restore.destination import Layout
from tierd.daemon.restore.source import Rebased

__all__ = ["PEER_SOURCE", "PeerOpener", "PeerSources", "holder_order", "peer_sources"]

#: The name a holder's source goes by (in a restore's ``source_tier`` and ``fallbacks``).
PEER_SOURCE = "peer:{}"
#: ``opener(holder, checkpoint_id, owners)``: the holder's copies as a Backend (``PeerFetch.source``).
PeerOpener = Callable[[PeerNode, int, Mapping[str, str]], Backend]


@dataclass(frozen=True)
class PeerSources:
    """The peer sources of one restore, nearest first, and what each holds."""

    sources: list[Backend] = field(default_factory=list)
    #: Source name -> the names (under the restore's root) it holds.
    partial: dict[str, frozenset[str]] = field(default_factory=dict)
    #: Source name -> (holder, name under the root -> the id of the part it belongs to).
    parts: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)


def holder_order(
    holdings: Sequence[PeerHolding], *, me: str, domain: str | None, key: str, silent_after: float
) -> list[str]:
    """The holders, nearest first (see the module docstring)."""
    first = {h.holder: h for h in holdings}
    return sorted(
        first,
        key=lambda name: (
            first[name].heartbeat_age > silent_after,
            name != me,
            domain is None or first[name].domain != domain,
            -score(key, name),
            name,
        ),
    )


def peer_sources(
    config: Config,
    checkpoint_id: int,
    holdings: Sequence[PeerHolding],
    layout: Layout,
    opener: PeerOpener | None,
) -> PeerSources:
    """One source per holder of a selected file (none without an opener: no peer token)."""
    if opener is None:
        return PeerSources()
    wanted = [h for h in holdings if h.relpaths & layout.names.keys()]
    order = holder_order(
        wanted,
        me=config.node,
        domain=config.fleet.failure_domain,
        key=str(checkpoint_id),
        silent_after=config.fleet.node_timeout,
    )
    found = PeerSources()
    for holder in order:
        held = [h for h in wanted if h.holder == holder]
        owners = {relpath: h.node for h in held for relpath in h.relpaths if relpath in layout.names}
        node = PeerNode(holder, held[0].url, held[0].domain)
        source = Rebased(opener(node, checkpoint_id, owners), layout.prefix)
        name = PEER_SOURCE.format(holder)
        found.sources.append(source)
        found.partial[name] = frozenset(layout.name_of(r) for r in owners)
        ids = {layout.name_of(r): h.part_id for h in held for r in h.relpaths if r in layout.names}
        found.parts[name] = (holder, ids)
    return found
