"""The conformance harness's Azure branch: a backend on Azurite, and its leftovers seen from outside.

A leftover of an Azure write is a blob holding staged blocks only; its "UploadId" is the
upload tag its block IDs start with (``azure.blocks.upload_tag``).
"""

from __future__ import annotations

import os
from typing import Any

from tests.fixtures.azurite import ACCOUNT_KEY, AzuriteServer
from tierd.daemon.backends import Backend, ByteBudget
from tierd.daemon.backends.azure import AzureBackend
from tierd.daemon.backends.azure.blocks import upload_tag

__all__ = ["abort_behind", "debris_left", "is_azure", "leave_debris", "make"]


def make(server: AzuriteServer, budget: ByteBudget | None, *, concurrency: int, verify: str) -> AzureBackend:
    """A fresh AzureBackend over a new container."""
    return AzureBackend(server.new_tier(concurrency=concurrency, verify=verify), budget=budget)


def is_azure(backend: Backend) -> bool:
    """Whether ``backend`` is an Azure tier."""
    return isinstance(backend, AzureBackend)


def container(backend: Backend) -> Any:
    """A blocking client of the backend's container."""
    from azure.storage.blob import ContainerClient

    assert isinstance(backend, AzureBackend)
    assert backend.tier.endpoint_url is not None
    credential = {"account_name": backend.tier.account, "account_key": ACCOUNT_KEY}
    return ContainerClient(backend.tier.endpoint_url, backend.tier.container, credential=credential)


def leave_debris(backend: Backend, relpath: str) -> str:
    """Stage one block of a new upload of ``relpath`` (as a killed write leaves it); returns its tag."""
    assert isinstance(backend, AzureBackend)
    tag = upload_tag(_random_crc(), backend.block_size)
    with container(backend) as client:
        client.get_blob_client(backend.prefix + relpath).stage_block(f"{tag}-000000-{0:016x}", b"partial")
    return tag


def _random_crc() -> str:
    import base64

    return base64.b64encode(os.urandom(8)).decode("ascii")


def debris_left(backend: Backend) -> list[str]:
    """The relpaths of blobs holding staged blocks only, sorted."""
    assert isinstance(backend, AzureBackend)
    with container(backend) as client:
        committed = {blob.name for blob in client.list_blobs()}
        staged = {blob.name for blob in client.list_blobs(include=["uncommittedblobs"])} - committed
    return sorted(name.removeprefix(backend.prefix) for name in staged)


def abort_behind(backend: Backend) -> int:
    """Delete every blob that holds staged blocks only, from outside; returns how many."""
    assert isinstance(backend, AzureBackend)
    names = debris_left(backend)
    with container(backend) as client:
        for name in names:
            client.get_blob_client(backend.prefix + name).delete_blob()
    return len(names)
