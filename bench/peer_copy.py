"""What one peer copy costs each side: a sender and a receiving daemon, each a process of its own.

In ``bench_peer``'s fleet every daemon sends, receives, hashes its part at first sight and
copies it to ``pfs`` at once, so its CPU is the whole daemon's. Here a real daemon with a
peer tier (``python -m tierd run``, SQLite catalog) only receives, and a child process
(``python -m bench.peer_copy SENDER_ARGS``) only sends: ``PeerClient.deliver`` of one file
``rounds`` times, as the replication service sends it (a file of tier 0, the peer token),
after one send unmeasured (the receiver's first big write measures its ``io_mode``). Each
side's CPU (utime + stime) over the sends, per GiB sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import note
from bench.retention_idle import daemon_cpu
from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port

__all__ = ["copy_cost"]

HOST = "127.0.0.24"
TOKEN = "bench-peer-token"
GIB = 1024**3


def copy_cost(root: Path, size: int, rounds: int) -> dict[str, float]:
    """Send a ``size``-byte file ``rounds`` times; seconds and each side's CPU-s per GiB.

    Empty (the sender's last error noted) when the sender failed.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "nvme").mkdir(exist_ok=True)
    port = free_port()
    data = {
        "catalog": {"url": f"sqlite:///{root / 'catalog.db'}"},
        "api": {"listen": f"{HOST}:{port}", "tokens": [{"name": "peers", "token": TOKEN, "role": "peer"}]},
        "node": "receiver",
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": str(root / "nvme")},
            {"name": "peers", "kind": "peer", "path": str(root / "peer")},
        ],
    }
    source = root / "source.bin"
    block = os.urandom(1024 * 1024)
    with source.open("wb") as out:
        for _ in range(size // len(block)):
            out.write(block)
        out.write(block[: size % len(block)])
    receiver = Daemon.prepare(root, data, exec=True)
    receiver.start()
    try:
        receiver.wait_ready()
        argv = [sys.executable, "-m", "bench.peer_copy", f"http://{HOST}:{port}", str(source)]
        # once unmeasured: the peer tier's first big write measures its io_mode (96 MiB written)
        child = subprocess.run([*argv, "1"], check=False, capture_output=True, text=True)
        before = sum(daemon_cpu(receiver.pid or 0))
        if child.returncode == 0:
            child = subprocess.run([*argv, str(rounds)], check=False, capture_output=True, text=True)
        received = sum(daemon_cpu(receiver.pid or 0)) - before  # the last answer comes after its fsync
    finally:
        receiver.stop()
    if child.returncode != 0:  # a full disk (other runs on it) or a dead receiver: no figures
        note(f"peer copy: the sender failed: {child.stderr.strip().splitlines()[-1:]}")
        return {}
    sent = json.loads(child.stdout)
    gib = size * rounds / GIB
    return {
        "copy_seconds_per_gib": round(sent["seconds"] / gib, 3),
        "sender_cpu_seconds_per_gib": round(sent["cpu"] / gib, 3),
        "receiver_cpu_seconds_per_gib": round(received / gib, 3),
    }


async def _send(url: str, source: Path, rounds: int) -> dict[str, float]:
    """The sender's side (in the child process): its CPU and time over the sends."""
    from tierd.daemon.backends.budget import ByteBudget
    from tierd.daemon.backends.peer.choose import PeerNode
    from tierd.daemon.backends.peer.client import PeerClient, PeerFile
    from tierd.daemon.backends.posix.reader import PosixReader
    from tierd.daemon.checksum import Crc64

    digest = Crc64()
    with source.open("rb") as src:
        while piece := src.read(16 * 1024 * 1024):
            digest.update(piece)
    size = source.stat().st_size
    client = PeerClient(TOKEN, ByteBudget(32 * 1024 * 1024))

    async def opened() -> PosixReader:
        return PosixReader(os.open(source, os.O_RDONLY), size, str(source))

    started, cpu = time.monotonic(), time.process_time()
    try:
        for index in range(rounds):
            file = PeerFile("sender", 1, f"step_1/shard_{index}.distcp", digest.hexdigest())
            await client.deliver(PeerNode("receiver", url), file, opened)
    finally:
        await client.close()
    return {"seconds": time.monotonic() - started, "cpu": time.process_time() - cpu}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_send(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))))
