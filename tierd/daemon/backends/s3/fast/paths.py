"""Which fast paths a tier uses (its ``fast_path`` setting and its endpoint), and attaching them.

=====================================  =====  ==========  ==============
``fast_path`` and endpoint             lean   pipelining  endpoint cache
=====================================  =====  ==========  ==============
``off``, any endpoint                  no     no          no
``auto``, a custom ``endpoint_url``    yes    yes         yes
(MinIO, Ceph, ``rclone serve s3``,
moto: the stores it is tested on)
``auto``, AWS (no ``endpoint_url``,    yes    no          yes
or a host under ``amazonaws.com``
or ``amazonaws.com.cn``)
=====================================  =====  ==========  ==============

Lean requests are ordinary SigV4 requests, so AWS gets them; HTTP/1.1 pipelining is not
used there (AWS does not document it, and it is not tested against AWS). What a plan
allows may still fail to attach: ``attach`` logs a warning naming the private attribute
botocore no longer has, and that path stays off. Every S3 tier logs one ``s3_paths``
event, when its client opens, with what is active and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tierd.config import S3Tier
from tierd.daemon.backends.s3.fast.endpoints import ReferencedOnly, cache_endpoints
from tierd.daemon.backends.s3.fast.lean import LeanRequests
from tierd.daemon.backends.s3.fast.pipelined_gets import PipelinedGets
from tierd.logs import get_logger

__all__ = ["FastPath", "Plan", "is_aws_endpoint", "plan_for"]

log = get_logger(__name__)

AWS_DOMAINS = ("amazonaws.com", "amazonaws.com.cn")


def is_aws_endpoint(endpoint_url: str | None) -> bool:
    """Whether requests go to AWS: no ``endpoint_url``, or one whose host is under an AWS domain."""
    if endpoint_url is None:
        return True
    host = (urlsplit(endpoint_url).hostname or "").lower().rstrip(".")
    return any(host == domain or host.endswith("." + domain) for domain in AWS_DOMAINS)


@dataclass(frozen=True)
class Plan:
    """The fast paths a tier's setting and endpoint allow, and why."""

    lean: bool
    pipelining: bool
    endpoint_cache: bool
    reason: str


def plan_for(tier: S3Tier) -> Plan:
    """What ``fast_path`` allows for this tier's endpoint (see the module docstring)."""
    if tier.fast_path == "off":
        return Plan(lean=False, pipelining=False, endpoint_cache=False, reason="fast_path: off")
    if is_aws_endpoint(tier.endpoint_url):
        return Plan(
            lean=True, pipelining=False, endpoint_cache=True, reason="auto: AWS endpoint, no pipelining"
        )
    return Plan(lean=True, pipelining=True, endpoint_cache=True, reason="auto: custom endpoint_url")


@dataclass(frozen=True)
class FastPath:
    """The fast paths attached to one client (None where off or not attached)."""

    lean: LeanRequests | None = None
    pipeline: PipelinedGets | None = None
    endpoint_cache: ReferencedOnly | None = None

    @classmethod
    def attach(
        cls, client: Any, tier: str, plan: Plan, *, connect_timeout: float, read_timeout: float
    ) -> FastPath:
        """Attach what ``plan`` allows to ``client``; log the outcome (``s3_paths``). Never raises."""
        reasons = [plan.reason]
        cache = cache_endpoints(client) if plan.endpoint_cache else None
        if isinstance(cache, str):
            _not_attached(tier, "endpoint_cache", cache)
            reasons.append(f"no endpoint cache: {cache}")
            cache = None
        lean = LeanRequests.attach(client) if plan.lean else None
        if lean is not None and not isinstance(lean, LeanRequests):
            if lean.unexpected:
                _not_attached(tier, "lean", lean.reason)
            reasons.append(f"no lean requests: {lean.reason}")
            lean = None
        pipeline = None
        if lean is not None and plan.pipelining:
            pipeline = PipelinedGets(lean, connect_timeout=connect_timeout, read_timeout=read_timeout)
        log.info(
            "s3_paths",
            tier=tier,
            lean=lean is not None,
            pipelining=pipeline is not None,
            endpoint_cache=cache is not None,
            reason="; ".join(reasons),
        )
        return cls(lean, pipeline, cache)


def _not_attached(tier: str, path: str, reason: str) -> None:
    """Say loudly that a fast path the tier wants did not attach (botocore's internals changed)."""
    log.warning("s3_fast_path_not_attached", tier=tier, path=path, reason=reason, falling_back="botocore")
