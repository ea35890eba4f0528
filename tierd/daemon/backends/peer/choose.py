"""Which nodes hold a copy of each node's part of a step: deterministic, spread, across domains.

Every daemon computes the same answer from the same inputs (the step's key, the fleet's live
nodes with their failure domains), so no node has to ask another. The nodes are put on a ring
for the step: ordered by their rendezvous score on the key (a hash of key and node name, so
each step gets another ring and a node joining or leaving moves few places), the failure
domains interleaved (one node of each domain in turn, the domains in the order of their best
score). Each node then sends its part to the ``replicas`` nodes after it on the ring that are
not in its own domain, and nodes of its domain only when no other is left. On such a ring
every node receives exactly ``replicas`` parts of the step when every node writes one (no
node receives more than its share). A dead or full peer is left out of ``nodes`` (or tried
and passed over): ``ring_order`` gives the order in which the others follow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import zip_longest

__all__ = ["PeerNode", "choose_peers", "ring", "ring_order", "score"]


@dataclass(frozen=True)
class PeerNode:
    """A node that may hold copies: its name, where its API is, and what fails with it."""

    name: str
    url: str
    domain: str | None = None

    @property
    def failure_domain(self) -> str:
        """Its domain; a node that declares none is a domain of its own."""
        return self.domain if self.domain is not None else f"\0{self.name}"


def score(key: str, node: str) -> int:
    """The rendezvous score of ``node`` for ``key`` (higher first): 64 bits of BLAKE2b."""
    digest = hashlib.blake2b(f"{key}\0{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def ring(key: str, nodes: Iterable[PeerNode]) -> list[PeerNode]:
    """The nodes in ring order for ``key``: by score, failure domains interleaved."""
    by_domain: dict[str, list[PeerNode]] = {}
    for node in sorted(nodes, key=lambda n: (-score(key, n.name), n.name)):
        by_domain.setdefault(node.failure_domain, []).append(node)
    groups = list(by_domain.values())  # in the order of each domain's best score
    return [node for turn in zip_longest(*groups) for node in turn if node is not None]


def ring_order(key: str, me: PeerNode, nodes: Iterable[PeerNode]) -> list[PeerNode]:
    """Every other node in the order ``me`` tries them: other domains first, each by ring order."""
    placed = ring(key, [*{n.name: n for n in nodes if n.name != me.name}.values(), me])
    start = next(i for i, n in enumerate(placed) if n.name == me.name)
    after = placed[start + 1 :] + placed[:start]
    return [n for n in after if n.failure_domain != me.failure_domain] + [
        n for n in after if n.failure_domain == me.failure_domain
    ]


def choose_peers(key: str, me: PeerNode, nodes: Sequence[PeerNode], replicas: int) -> list[PeerNode]:
    """The ``replicas`` nodes that hold ``me``'s part of the step ``key`` (fewer in a smaller fleet)."""
    return ring_order(key, me, nodes)[:replicas]
