"""Where an Azure tier's requests go and what signs them: its account URL, its credential.

Credentials, the first the tier sets: ``account_key`` (Shared Key), ``sas_token``, else the
Azure identity chain (``azure.identity.aio.DefaultAzureCredential``: managed identity on
Azure VMs, workload identity on AKS, environment variables, the Azure CLI's login), which
is imported only then: ``azure-identity`` and its MSAL stack are not needed by a tier with a
key or a SAS token.

No request is retried in place: the file level (``tierd.daemon.transfer.retry``) retries,
as for S3.
"""

from __future__ import annotations

import importlib
from typing import Any

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential

from tierd.config import AzureTier
from tierd.errors import PermanentBackendError

__all__ = ["account_url", "credential"]


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
