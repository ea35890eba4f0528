"""The container client of an Azure tier: its URL, its credential, its request settings.

Credentials, the first the tier sets: ``account_key`` (Shared Key), ``sas_token``, else the
Azure identity chain (``azure.identity.aio.DefaultAzureCredential``: managed identity on
Azure VMs, workload identity on AKS, environment variables, the Azure CLI's login), which
is imported only then: ``azure-identity`` and its MSAL stack are not needed by a tier with a
key or a SAS token.

The SDK sends a request at most ``REQUEST_ATTEMPTS`` times (its default is eleven, with
back-off up to minutes): one retry in place for a throttled or dropped block or range, the
file level (``tierd.daemon.transfer.retry``) retries the rest, as for S3.
"""

from __future__ import annotations

import importlib
from typing import Any

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.storage.blob.aio import ContainerClient

from tierd import __version__
from tierd.config import AzureTier
from tierd.errors import PermanentBackendError

__all__ = ["CONNECT_TIMEOUT", "READ_TIMEOUT", "REQUEST_ATTEMPTS", "account_url", "container_client"]

REQUEST_ATTEMPTS = 2
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 120
#: The most one GET asks for: a reader's read or a read-back range is one request.
GET_LIMIT = 64 * 1024 * 1024


def account_url(tier: AzureTier) -> str:
    """``endpoint_url`` (Azurite: ``http://host:10000/<account>``), else the public cloud's."""
    if tier.endpoint_url:
        return tier.endpoint_url.rstrip("/")
    return f"https://{tier.account}.blob.core.windows.net"


def credential(tier: AzureTier) -> Any:
    """The tier's credential: its key, its SAS token, or the identity chain.

    Raises PermanentBackendError when the identity chain is wanted and ``azure-identity``
    is not installed.
    """
    if tier.account_key is not None:
        return AzureNamedKeyCredential(tier.account, tier.account_key.get_secret_value())
    if tier.sas_token is not None:
        return AzureSasCredential(tier.sas_token.get_secret_value().lstrip("?"))
    try:
        identity = importlib.import_module("azure.identity.aio")
    except ImportError as exc:
        raise PermanentBackendError(
            f"tier {tier.name}: neither account_key nor sas_token is set, and the Azure identity "
            "chain needs the azure-identity package (pip install azure-identity)"
        ) from exc
    return identity.DefaultAzureCredential()


def container_client(tier: AzureTier, found: Any, *, single_put_limit: int) -> ContainerClient:
    """A ContainerClient for the tier with credential ``found`` (no request is sent until it is used)."""
    return ContainerClient(
        account_url(tier),
        tier.container,
        credential=found,
        retry_total=REQUEST_ATTEMPTS - 1,
        retry_backoff_factor=0.5,
        connection_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        max_single_put_size=single_put_limit,
        max_block_size=single_put_limit,
        max_single_get_size=GET_LIMIT,
        max_chunk_get_size=GET_LIMIT,
        user_agent=f"tierd/{__version__}",
        connection_data_block_size=256 * 1024,
    )
