"""botocore's endpoint resolution, worked out once per bucket instead of once per request.

botocore resolves the endpoint of every request by evaluating S3's endpoint rule set
with the request's parameters, behind an LRU cache keyed on all of them. ``Key`` (and
``Prefix``, ``CopySource``) are among them, so with a new key per request the cache never
hits and each request spends about a third of its client-side CPU (~0.5 ms of ~1.5 ms
here) walking the rules. No rule reads those parameters: the provider installed here
drops every parameter the rule set never references before asking the cached one, so a
bucket's endpoint is worked out once.

It reaches into the client's private ``_ruleset_resolver`` (its ``_provider`` and
``_param_definitions``). ``cache_endpoints`` says why it could not attach when those are
not as expected (the caller logs it loudly), and the client is then left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import botocore.loaders

__all__ = ["ReferencedOnly", "cache_endpoints", "referenced_parameters"]

RULE_SET = "endpoint-rule-set-1"


class ReferencedOnly:
    """An endpoint provider that passes on only the parameters its rules reference.

    ``resolutions`` counts the endpoints it resolved (each one a request botocore made).
    """

    def __init__(self, inner: Any, used: frozenset[str]) -> None:
        self._inner, self._used = inner, used
        self.resolutions = 0

    def resolve_endpoint(self, **params: Any) -> Any:
        """The wrapped provider's (cached) answer for the parameters that matter."""
        self.resolutions += 1
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


def cache_endpoints(client: Any) -> ReferencedOnly | str:
    """Make ``client``'s endpoint resolution ignore unreferenced parameters.

    Returns the installed provider, or why it could not be installed (botocore's private
    attributes or data files are not what this expects).
    """
    resolver = getattr(client, "_ruleset_resolver", None)
    provider = getattr(resolver, "_provider", None)
    declared = getattr(resolver, "_param_definitions", None)
    if isinstance(provider, ReferencedOnly):
        return provider
    if resolver is None or provider is None or not isinstance(declared, dict):
        return "the client has no _ruleset_resolver._provider and _param_definitions"
    service = client.meta.service_model
    try:
        # The client's own loader (the tier's shared lean one: plain dicts), not a new one
        # parsing the 0.7 MB file into OrderedDicts.
        loader = getattr(client, "_loader", None) or botocore.loaders.create_loader()
        rule_set = loader.load_service_model(service.service_name, RULE_SET, service.api_version)
    except Exception as exc:  # a missing or unexpected data file: keep botocore's own way
        return f"botocore's {RULE_SET} could not be loaded: {exc}"
    if set(rule_set.get("parameters", {})) != set(declared):
        return f"botocore's {RULE_SET} is not the rule set the client evaluates"
    cached = ReferencedOnly(provider, referenced_parameters(rule_set))
    resolver._provider = cached
    return cached
