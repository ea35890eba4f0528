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

botocore keeps every data file it loads for the life of the session, parsed into
OrderedDicts: ``endpoints.json`` (every AWS service in every region, ~7 MB of Python objects,
of which only the S3 client and the credential providers' clients are ever used) and S3's
service model (3 MB, two thirds of it documentation). ``LeanFileLoader`` keeps only the
services ``ENDPOINT_SERVICES`` of the one and drops the ``documentation`` of the other,
and makes both plain dicts: a client then holds ~1.8 MB of models instead of ~11 MB. It
parses ``endpoints.json`` one service at a time (``s3.leanjson``), each one it does not keep
freed before the next is parsed: parsed whole and trimmed after, the 1.2 MB file's ~400
services left ~4 MB of the daemon's resident memory behind in half-empty arenas. Every
session of the process shares one loader (``shared_loader``), so a second S3 tier (or a test's
hundredth backend) neither reads nor holds the files again: ~0.25 s of CPU per session, and
the models are read-only to botocore, as they already were between one session's clients.

A tier builds clients only: ``ClientSession`` is aioboto3's session without its resource
classes and the S3 transfer methods it injects into every S3 client class (``upload_file``,
``download_fileobj``, ``copy``; tierd writes and copies through its own multipart code). Their
import (s3transfer, multiprocessing, aiofiles, boto3's CRT client: 46 modules) was ~2 MB of a
daemon's resident memory, and the extra data path aioboto3 adds for its resources was appended
to the shared loader's search path once per session.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aioboto3
import aiobotocore
import botocore.utils
from aiobotocore.session import AioSession
from botocore.loaders import JSONFileLoader, create_loader

from tierd import __version__
from tierd.daemon.backends.s3.leanjson import members_kept

__all__ = [
    "ENDPOINT_SERVICES",
    "USER_AGENT",
    "ClientSession",
    "LeanFileLoader",
    "botocore_session",
    "parse_timestamp",
]

#: The services whose endpoints a tier's session may resolve: S3, and the clients botocore's
#: credential providers build (assume-role, web identity, SSO).
ENDPOINT_SERVICES = frozenset({"s3", "sts", "sso", "sso-oidc"})
#: Keys of operations and shapes only docstrings read.
DOCUMENTATION_KEYS = frozenset({"documentation", "documentationUrl"})

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


def undocumented(value: Any) -> Any:
    """``value`` without the ``DOCUMENTATION_KEYS`` of any of its dicts (removed in place)."""
    if isinstance(value, dict):
        for key in DOCUMENTATION_KEYS & value.keys():
            del value[key]
        for item in value.values():
            undocumented(item)
    elif isinstance(value, list):
        for item in value:
            undocumented(item)
    return value


def lean_endpoints(data: dict[str, Any]) -> dict[str, Any]:
    """The ``endpoints`` data with only the ``ENDPOINT_SERVICES`` of each partition."""
    for partition in data.get("partitions", []):
        services = partition.get("services", {})
        partition["services"] = {name: services[name] for name in ENDPOINT_SERVICES if name in services}
    return data


def lean_model(data: dict[str, Any]) -> dict[str, Any]:
    """A service model without its documentation, nor that of its operations and shapes.

    Elsewhere (``clientContextParams``) botocore reads a ``documentation`` key itself.
    """
    data.pop("documentation", None)
    for part in ("operations", "shapes"):
        undocumented(data.get(part))
    return data


class LeanFileLoader(JSONFileLoader):
    """botocore's JSON loader keeping only what a tier's clients read (module docstring).

    It parses into plain dicts (as ordered as botocore's OrderedDicts) and trims them in place:
    parsing into OrderedDicts and copying them into dicts held both at once, and the garbage
    stayed in the daemon's resident memory (8.2 MB of heap at the peak of a client's opening,
    4.4 MB once open).
    """

    def _load_file(self, full_path: str, open_method: Any) -> Any:
        if not os.path.isfile(full_path):
            return None
        with open_method(full_path, "rb") as fp:
            payload = fp.read().decode("utf-8")
        if os.path.basename(full_path).split(".", 1)[0] == "endpoints":
            try:
                return members_kept(payload, ("partitions", "*", "services"), ENDPOINT_SERVICES)
            except ValueError:
                pass  # not the layout walked there: parsed whole, and trimmed by load_file
        return json.loads(payload)

    def load_file(self, file_path: str) -> Any:
        """The file's data as plain dicts; ``endpoints`` and service models trimmed."""
        data = super().load_file(file_path)
        if data is None:
            return None
        name = file_path.rsplit("/", 1)[-1]
        if name == "endpoints":
            return lean_endpoints(data)
        if name.startswith("service-"):
            return lean_model(data)
        return data


@functools.cache
def shared_loader(data_path: str | None) -> Any:
    """The one botocore data loader of the process for ``data_path``, reading with ``LeanFileLoader``."""
    loader = create_loader(data_path)
    loader.file_loader = LeanFileLoader()
    return loader


def botocore_session() -> AioSession:
    """A botocore session whose clients parse timestamps with ``parse_timestamp``.

    Its data files are read by ``LeanFileLoader``.
    """
    session = AioSession()
    session.register_component("data_loader", shared_loader(session.get_config_variable("data_path")))
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    return session


class ClientSession(aioboto3.Session):
    """aioboto3's session for clients only: no resources, no injected transfer methods (module docstring)."""

    def _setup_loader(self) -> None:
        """Leave the shared loader's search path as it is (boto3's data holds resource models only)."""

    def _register_default_handlers(self) -> None:
        """Register none of aioboto3's resource and transfer customisations."""
