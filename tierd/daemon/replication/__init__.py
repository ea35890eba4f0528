"""Peer replication: this node's parts of each step copied to other nodes' peer tiers.

``service`` (the pass loop: which parts lack copies, which nodes are live, one task per part;
the restart's clean-up), ``sender`` (one part to its peers: each holder gets every file, or its
copy is ``failed`` and the next node on the ring is tried), ``lifecycle`` (dead holders' copies
written off; copies dropped once failed, durable elsewhere, or past the peer tier's retention),
``eviction`` (disk pressure on the peer directory: the copies held for others go, safe ones first).
"""

from __future__ import annotations

from tierd.daemon.replication.service import ReplicationService

__all__ = ["ReplicationService"]
