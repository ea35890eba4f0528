"""A tier's botocore session keeps only the data files' parts its clients read (``s3.client``).

botocore keeps every data file it loads for the session's life: ``endpoints.json`` for every
AWS service (~7 MB of Python objects) and S3's model with its documentation (3 MB).
"""

from __future__ import annotations

import gc
import tracemalloc
from collections import OrderedDict
from typing import Any

import botocore.loaders
import pytest
from aiobotocore.session import AioSession

from tierd.daemon.backends.s3.client import ENDPOINT_SERVICES, LeanFileLoader, botocore_session, shared_loader
from tierd.daemon.backends.s3.fast.endpoints import ReferencedOnly, cache_endpoints, referenced_parameters

#: What building an S3 client may add to the Python heap (it added 13.5 MB before the lean loader).
CLIENT_HEAP_LIMIT = 8_000_000
#: The heap's peak while the first client opens: 8.2 MB when the files were parsed into
#: OrderedDicts and copied into dicts, 5.3 MB parsed into dicts and trimmed in place (what is
#: freed after stays in the daemon's resident memory as fragmented arenas).
CLIENT_PEAK_LIMIT = 6_500_000
#: The Python heap's peak while ``endpoints.json`` is read: its text twice (bytes and str, 2.5
#: MB) and one service at a time; 5.3 MB when it was parsed whole, then trimmed (``s3.leanjson``).
ENDPOINTS_PEAK_LIMIT = 3_500_000
KEYS = {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "secret"}


def _client(session: AioSession, service: str, **settings: str) -> Any:
    """``session``'s client context for ``service`` (any name: the stubs list each one)."""
    maker: Any = session
    return maker.create_client(service, **settings, **KEYS)


def _walk(value: Any) -> Any:
    """Every dict nested in ``value``."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def test_endpoints_keep_only_the_services_a_tier_uses() -> None:
    endpoints, _ = botocore_session().get_component("data_loader").load_data_with_path("endpoints")
    services = {p["partition"]: p["services"] for p in endpoints["partitions"]}
    for partition in "aws", "aws-cn", "aws-us-gov":
        assert {"s3", "sts"} <= set(services[partition])
    assert set().union(*services.values()) <= ENDPOINT_SERVICES


def test_the_endpoints_file_is_read_one_service_at_a_time() -> None:
    loader = botocore.loaders.create_loader()
    loader.file_loader = LeanFileLoader()
    gc.collect()
    tracemalloc.start()
    try:
        loader.load_data("endpoints")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ENDPOINTS_PEAK_LIMIT, peak


def test_the_s3_model_has_every_operation_and_no_documentation() -> None:
    lean = botocore_session().get_component("data_loader").load_service_model("s3", "service-2")
    full = AioSession().get_component("data_loader").load_service_model("s3", "service-2")
    assert lean["operations"].keys() == full["operations"].keys()
    assert lean["shapes"].keys() == full["shapes"].keys()
    assert not any("documentation" in node for node in _walk([lean["operations"], lean["shapes"]]))
    assert not any(isinstance(node, OrderedDict) for node in _walk(lean))


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1"])
@pytest.mark.parametrize("service", ["s3", "sts"])
async def test_clients_resolve_the_endpoints_botocore_does(service: str, region: str) -> None:
    async with (
        _client(botocore_session(), service, region_name=region) as lean,
        _client(AioSession(), service, region_name=region) as full,
    ):
        assert lean.meta.endpoint_url == full.meta.endpoint_url
        assert lean.meta.region_name == full.meta.region_name


async def test_an_s3_client_holds_little_of_the_models() -> None:
    shared_loader.cache_clear()  # the models loaded afresh, inside the measurement
    session = botocore_session()
    gc.collect()
    tracemalloc.start()
    try:
        async with _client(session, "s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9"):
            gc.collect()
            held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < CLIENT_HEAP_LIMIT, held
    assert peak < CLIENT_PEAK_LIMIT, peak


async def test_sessions_share_one_loader_and_read_each_file_once(monkeypatch: pytest.MonkeyPatch) -> None:
    shared_loader.cache_clear()
    reads: list[str] = []
    load_file = LeanFileLoader.load_file

    def counted(self: LeanFileLoader, file_path: str) -> Any:
        reads.append(file_path.rsplit("/", 1)[-1])
        return load_file(self, file_path)

    monkeypatch.setattr(LeanFileLoader, "load_file", counted)
    first, second = botocore_session(), botocore_session()
    assert first.get_component("data_loader") is second.get_component("data_loader")
    for session in (first, second):
        async with _client(session, "s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9"):
            pass
    assert reads.count("endpoints") == 1
    assert reads.count("service-2") == 1


async def test_the_endpoint_cache_reads_the_rule_set_through_the_clients_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new loader would parse the 0.7 MB rule set again into OrderedDicts (~2 ms of CPU and its garbage)."""
    session = botocore_session()
    async with _client(session, "s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9") as client:

        def no_new_loader(*_: Any, **__: Any) -> Any:
            raise AssertionError("cache_endpoints made a loader of its own")

        monkeypatch.setattr(botocore.loaders, "create_loader", no_new_loader)
        cached = cache_endpoints(client)
        assert isinstance(cached, ReferencedOnly), cached
        assert "Bucket" in referenced_parameters(
            session.get_component("data_loader").load_service_model("s3", "endpoint-rule-set-1")
        )
