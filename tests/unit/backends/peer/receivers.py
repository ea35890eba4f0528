"""A receiver of peer copies as the sending tests see it: its node and its peer directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tierd.daemon.backends.peer.choose import PeerNode

__all__ = ["Receiver"]


@dataclass
class Receiver:
    """A receiving daemon's node (name, URL, domain) and the directory it keeps copies in."""

    node: PeerNode
    peer_dir: Path

    def holds(self) -> list[str]:
        """Every file in the peer directory, temporary ones included."""
        return sorted(str(p.relative_to(self.peer_dir)) for p in self.peer_dir.rglob("*") if p.is_file())
