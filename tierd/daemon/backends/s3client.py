"""Per-request CPU of the aiobotocore client: endpoint resolution and timestamp parsing.

A small object costs one or two requests, and botocore's CPU per request (~1.5 ms here)
is what bounds small-file throughput on a two-core machine. Two of its costs are cut:

botocore resolves the endpoint of every request by evaluating S3's endpoint rule set
with the request's parameters, behind an LRU cache keyed on all of them. ``Key`` (and
``Prefix``, ``CopySource``) are among them, so with a new key per request the cache never
hits and each request spends about a third of its client-side CPU (~0.5 ms of ~1.5 ms
here) walking the rules. No rule reads those parameters: the provider installed here
drops every parameter the rule set never references before asking the cached one, so a
bucket's endpoint is worked out once. Should botocore's internals differ from what this
expects, the client is left as it is.

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
from collections.abc import Iterator
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiobotocore
import botocore.loaders
import botocore.utils
from aiobotocore.session import AioSession

from tierd import __version__
from tierd.logs import get_logger

__all__ = ["USER_AGENT", "cache_endpoints", "fast_session", "parse_timestamp", "referenced_parameters"]

log = get_logger(__name__)

RULE_SET = "endpoint-rule-set-1"
# botocore appends its own name and version.
USER_AGENT = f"tierd/{__version__} aiobotocore/{aiobotocore.__version__} Python/{platform.python_version()}"


class _ReferencedOnly:
    """An endpoint provider that passes on only the parameters its rules reference."""

    def __init__(self, inner: Any, used: frozenset[str]) -> None:
        self._inner, self._used = inner, used

    def resolve_endpoint(self, **params: Any) -> Any:
        """The wrapped provider's (cached) answer for the parameters that matter."""
        return self._inner.resolve_endpoint(**{k: v for k, v in params.items() if k in self._used})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("ref"), str):
            yield node["ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def referenced_parameters(rule_set: dict[str, Any]) -> frozenset[str]:
    """The declared parameters that some rule of ``rule_set`` reads."""
    declared = set(rule_set.get("parameters", {}))
    return frozenset(declared & set(_refs(rule_set.get("rules", []))))


def cache_endpoints(client: Any) -> bool:
    """Make ``client``'s endpoint resolution ignore unreferenced parameters; False if not possible."""
    resolver = getattr(client, "_ruleset_resolver", None)
    provider = getattr(resolver, "_provider", None)
    declared = getattr(resolver, "_param_definitions", None)
    if provider is None or not isinstance(declared, dict) or isinstance(provider, _ReferencedOnly):
        return False
    service = client.meta.service_model
    try:
        rule_set = botocore.loaders.create_loader().load_service_model(
            service.service_name, RULE_SET, service.api_version
        )
    except Exception as exc:  # a missing or unexpected data file: keep botocore's own way
        log.debug("endpoint_cache_unavailable", error=str(exc))
        return False
    if set(rule_set.get("parameters", {})) != set(declared):
        return False  # not the rule set this client evaluates
    assert resolver is not None
    resolver._provider = _ReferencedOnly(provider, referenced_parameters(rule_set))
    return True


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


def fast_session() -> AioSession:
    """A botocore session whose clients parse timestamps with ``parse_timestamp``."""
    session = AioSession()
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    return session
