"""systemd's notify protocol, spoken directly over ``$NOTIFY_SOCKET`` (no libsystemd needed)."""

from __future__ import annotations

import os
import socket

__all__ = ["notify", "watchdog_interval"]


def notify(message: str) -> bool:
    """Send ``message`` (e.g. ``READY=1``) to systemd; False when not run under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half systemd's timeout), or None when off."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 1_000_000 / 2
