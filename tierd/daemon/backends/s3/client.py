"""The aiobotocore client's settings that cost less CPU per request, through public knobs.

A small object costs one or two requests, and botocore's CPU per request (~1.5 ms here)
is what bounds small-file throughput on a two-core machine. What can be cut through
botocore's public settings is cut here, whatever the tier's ``fast_path`` (what needs its
private attributes is in ``fast``):

botocore builds the User-Agent header twice per request from some thirty components,
sanitising each (~10% of a GetObject's CPU); a fixed ``USER_AGENT`` given as the client's
``user_agent`` setting replaces that with one string.

botocore parses every timestamp (``Last-Modified`` of each HeadObject and GetObject) with
dateutil, ~110 us each; ``parse_timestamp`` reads S3's two formats (HTTP date in headers,
ISO 8601 in bodies) with the standard library in ~5 us and leaves anything else, or
anything without a time zone, to botocore's parser.
"""

from __future__ import annotations

import platform
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiobotocore
import botocore.utils
from aiobotocore.session import AioSession

from tierd import __version__

__all__ = ["USER_AGENT", "botocore_session", "parse_timestamp"]

# botocore appends its own name and version.
USER_AGENT = f"tierd/{__version__} aiobotocore/{aiobotocore.__version__} Python/{platform.python_version()}"


def parse_timestamp(value: Any) -> datetime:
    """An aware datetime from S3's HTTP-date or ISO 8601 text; botocore's parser for the rest."""
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value) if value[0].isdigit() else parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    fallback: datetime = botocore.utils.parse_timestamp(value)
    return fallback


def botocore_session() -> AioSession:
    """A botocore session whose clients parse timestamps with ``parse_timestamp``."""
    session = AioSession()
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    return session
