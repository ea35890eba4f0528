"""Per-request CPU of the aiobotocore client: endpoint resolution that its cache can serve.

botocore resolves the endpoint of every request by evaluating S3's endpoint rule set
with the request's parameters, behind an LRU cache keyed on all of them. ``Key`` (and
``Prefix``, ``CopySource``) are among them, so with a new key per request the cache never
hits and each request spends about a third of its client-side CPU (~0.5 ms of ~1.5 ms
here) walking the rules. No rule reads those parameters: the provider installed here
drops every parameter the rule set never references before asking the cached one, so a
bucket's endpoint is worked out once. Should botocore's internals differ from what this
expects, the client is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import botocore.loaders

from tierd.logs import get_logger

__all__ = ["cache_endpoints", "referenced_parameters"]

log = get_logger(__name__)

RULE_SET = "endpoint-rule-set-1"


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
