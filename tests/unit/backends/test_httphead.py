"""A request head written by tierd's own HTTP clients: as sent, and never with a smuggled line."""

from __future__ import annotations

import pytest

from tierd.daemon.backends.httphead import encode_head


def test_the_request_line_fixed_fields_then_headers_and_a_blank_line() -> None:
    head = encode_head(["PUT /v1/x HTTP/1.1", "Host: h:1"], {"Authorization": "Bearer t"})

    assert head == b"PUT /v1/x HTTP/1.1\r\nHost: h:1\r\nAuthorization: Bearer t\r\n\r\n"


@pytest.mark.parametrize(
    ("lines", "headers"),
    [
        (["GET /a\r\nX: 1 HTTP/1.1"], {}),
        (["GET /a HTTP/1.1"], {"Range": "bytes=0-1\r\n\r\nGET /other HTTP/1.1"}),
        (["GET /a HTTP/1.1"], {"X-Name\n": "v"}),
    ],
)
def test_a_line_break_anywhere_is_refused(lines: list[str], headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="line break"):
        encode_head(lines, headers)
