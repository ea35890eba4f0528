"""Pipelined HTTP/1.1 answers to GETs, read in order into their views (no I/O).

``AnswerParser`` is fed what a connection receives through ``buffer()``/``feed(n)`` (the
shape of ``asyncio.BufferedProtocol``). It takes only plain answers: a 206 (or a 200, as
rclone sends) whose ``Content-Range`` is the whole object, or a 200 without one, with a
``Content-Length`` equal to the view's size; given each view's ``firsts`` (ranged GETs), a
206 (or 200) whose ``Content-Range`` is exactly the bytes asked, of any total. Their bodies
go into the views: a long rest of a body is read straight into its view, the rest through a
scratch buffer. Any other answer is read past, if it has a short ``Content-Length``, and its
object is left for the caller to fetch another way.

The connection has no further use once an answer cannot be framed (no length, a transfer
coding, a malformed head, an interim 1xx), once a body to read past is long, or after an
answer that says ``Connection: close``: ``ended`` is set, and the objects not yet answered
are for the caller to ask again.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["AnswerParser"]

SCRATCH = 256 * 1024
#: Bodies at least this long, with nothing else buffered, are read straight into their views.
DIRECT = 64 * 1024
#: Longest head and longest body read past (an error document) before the connection is given up.
HEAD_LIMIT = 64 * 1024
SKIP_LIMIT = 64 * 1024


class AnswerParser:
    """The answers to GETs, one per view, in order: of whole objects, or from ``firsts``."""

    def __init__(self, views: Sequence[memoryview], firsts: Sequence[int] | None = None) -> None:
        self._views = views
        self._firsts = firsts
        self.filled = [False] * len(views)
        self.answered = 0  # answers read to their end
        self.ended = False  # the connection can carry no further answer
        self.extra = False  # bytes came after the last answer
        self.closed = False  # an answer said the store closes the connection after it
        self._bytes = bytearray(SCRATCH)
        self._scratch = memoryview(self._bytes)
        self._start = self._end = 0  # unread bytes of the scratch buffer
        self._body: memoryview | None = None  # the answer whose body is being read (None: read past)
        self._left = -1  # body bytes still to come; -1 while reading a head
        self._close_after = False
        self._direct = False

    @property
    def done(self) -> bool:
        """Whether no more bytes are wanted: every answer read, or the connection ended."""
        return self.ended or self.answered == len(self._views)

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry further requests."""
        return self.answered == len(self._views) and not self.ended and not self.extra

    def buffer(self) -> memoryview:
        """Where the next received bytes go."""
        body, left = self._body, self._left
        if body is not None and left >= DIRECT and self._start == self._end:
            self._direct = True
            return body[len(body) - left :]
        self._direct = False
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._scratch) - self._end < DIRECT:  # little room left: move the unread bytes down
            kept = self._end - self._start
            self._scratch[:kept] = self._scratch[self._start : self._end]
            self._start, self._end = 0, kept
        return self._scratch[self._end :]

    def feed(self, count: int) -> None:
        """Take ``count`` bytes received into the last ``buffer()``."""
        if self._direct:
            self._left -= count
            if self._left == 0:
                self._finish()
            return
        self._end += count
        while self._start < self._end and not self.ended:
            if self.answered == len(self._views):
                self.extra = True  # nothing was asked: the stream is not what it seems
                return
            if not (self._read_body() if self._left >= 0 else self._read_head()):
                return

    def _read_body(self) -> bool:
        take = min(self._left, self._end - self._start)
        if self._body is not None:
            at = len(self._body) - self._left
            self._body[at : at + take] = self._scratch[self._start : self._start + take]
        self._start += take
        self._left -= take
        if self._left == 0:
            self._finish()
        return True

    def _read_head(self) -> bool:
        """Parse a complete head in the scratch buffer; False while it is incomplete."""
        end = self._bytes.find(b"\r\n\r\n", self._start, self._end)
        if end < 0:
            if self._end - self._start > HEAD_LIMIT:
                self._end_here()
            return False
        head = bytes(self._bytes[self._start : end])
        self._start = end + 4
        self._begin(head)
        return True

    def _begin(self, head: bytes) -> None:
        """Start reading the answer whose head is ``head``."""
        parsed = _parse_head(head)
        if parsed is None:
            self._end_here()
            return
        status, fields, close = parsed
        length = _content_length(fields)
        if length is None or b"transfer-encoding" in fields or status < 200 or status in (204, 304):
            self._end_here()
            return
        view = self._views[self.answered]
        size = len(view)
        if length == size and self._plain(status, fields.get(b"content-range"), size):
            self._body = view
        elif length > SKIP_LIMIT:
            self._end_here()
            return
        else:
            self._body = None
        self._close_after = close
        self._left = length
        if length == 0:
            self._finish()

    def _plain(self, status: int, content_range: bytes | None, size: int) -> bool:
        """Whether the answer is the bytes the current view asked for."""
        if self._firsts is None:
            return _whole(status, content_range, size)
        first = self._firsts[self.answered]
        asked = f"bytes {first}-{first + size - 1}/".encode()
        return status in (200, 206) and content_range is not None and content_range.startswith(asked)

    def _finish(self) -> None:
        """The current answer has been read to its end."""
        if self._body is not None:
            self.filled[self.answered] = True
        self.answered += 1
        self._body, self._left, self._direct = None, -1, False
        if self._close_after:
            self.ended = self.closed = True

    def _end_here(self) -> None:
        """The current answer cannot be read: count it as answered, unfilled, and end."""
        self.answered += 1
        self.ended = True
        self._body, self._left, self._direct = None, -1, False


def _parse_head(head: bytes) -> tuple[int, dict[bytes, bytes], bool] | None:
    """(status, fields with lower-case names, whether the connection closes after); None if malformed."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        return None
    fields: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        name = name.lower()
        if not colon or not name or name != name.strip() or name in fields:
            return None  # no colon, space before it, or a repeated field: do not guess
        fields[name] = value.strip()
    tokens = {token.strip() for token in fields.get(b"connection", b"").lower().split(b",")}
    close = b"close" in tokens or (version == b"HTTP/1.0" and b"keep-alive" not in tokens)
    return int(code), fields, close


def _whole(status: int, content_range: bytes | None, size: int) -> bool:
    """Whether an answer of ``size`` bytes is the whole object (some stores send 200 with a range)."""
    if content_range is not None:
        return status in (200, 206) and content_range == f"bytes 0-{size - 1}/{size}".encode()
    return status == 200


def _content_length(fields: dict[bytes, bytes]) -> int | None:
    value = fields.get(b"content-length")
    if value is None or not value.isdigit():
        return None
    return int(value)
