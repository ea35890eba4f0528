"""An HTTP/1.1 request's head as bytes, for the clients that write requests themselves.

``httpwire`` (GCS's media GETs, Azure's blob GETs) and ``peer.rawput`` (a file's PUT by
``sendfile``) write their requests straight to a connection of their own. A line break in a
request line or a header value would end the head early and let the rest be read as a
request of its own, so such a head is refused (ValueError) rather than sent.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["encode_head"]


def encode_head(lines: list[str], headers: Mapping[str, str]) -> bytes:
    """``lines`` (the request line and fixed fields), then ``headers``, as a head ending in a blank line.

    Raises ValueError when any of them holds a line break.
    """
    every = [*lines, *(f"{name}: {value}" for name, value in headers.items())]
    if any("\r" in line or "\n" in line for line in every):
        raise ValueError("a request line or header holds a line break")
    return ("\r\n".join(every) + "\r\n\r\n").encode("latin-1")
