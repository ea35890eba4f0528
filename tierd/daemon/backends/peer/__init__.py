"""The peer tier: copies of one node's tier-0 parts held on other nodes of the fleet.

``store`` (the receiving side: this node's peer directory, where other nodes' parts land
through the API's ``/v1/peer`` routes, each file checked against its first-sight CRC64NVME),
``stream`` (an HTTP request body as the RangeReader the POSIX write path reads),
``choose`` (which nodes hold each node's part: a ring per step, failure domains interleaved),
``client`` (the sending side: a file streamed to its peers, the next one tried on a refusal),
``rawput`` (a file's body sent by ``os.sendfile`` on a plain-HTTP connection of its own),
``fetch`` (the restore's side: a part read back from a holder, with ranged GETs).
"""

from __future__ import annotations

from tierd.daemon.backends.peer.store import CHECKSUM_HEADER, PeerStore
from tierd.daemon.backends.peer.stream import StreamReader

__all__ = ["CHECKSUM_HEADER", "PeerStore", "StreamReader"]
