"""The object stores' tiers: S3 (and S3-compatible stores), Google Cloud Storage, Azure Blob.

``TierConfig`` is any tier of the chain, told apart by its ``kind``; ``AnyTier`` the same as a
plain union for annotations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import ByteSize, Field, SecretStr, field_validator, model_validator

from tierd.config.tiers import ObjectStoreTier, PosixTier

__all__ = [
    "AZURE_MAX_NAME_CHARS",
    "GCS_MAX_NAME_BYTES",
    "S3_ARCHIVE_CLASSES",
    "S3_MAX_KEY_BYTES",
    "AnyTier",
    "AzureTier",
    "GcsTier",
    "S3StorageClass",
    "S3Tier",
    "TierConfig",
]


#: The longest object key S3 takes, in bytes of its UTF-8. AWS refuses longer keys; some
#: S3-compatible stores (moto) accept them, so tierd checks before it sends one.
S3_MAX_KEY_BYTES = 1024


#: S3's storage classes tierd writes with (``storage_class``); absent: the bucket's default.
S3StorageClass = Literal[
    "STANDARD", "STANDARD_IA", "INTELLIGENT_TIERING", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"
]
#: Classes whose objects S3 must restore (RestoreObject) before a GET can read them.
S3_ARCHIVE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})


class S3Tier(ObjectStoreTier):
    """An S3-compatible bucket (AWS, MinIO, Ceph RGW, ...)."""

    max_name: ClassVar[int] = S3_MAX_KEY_BYTES
    name_what: ClassVar[str] = "an S3 key"

    kind: Literal["s3"]
    bucket: str = Field(min_length=3, max_length=63)
    endpoint_url: str | None = None
    region: str | None = None
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    verify_tls: bool = True
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    profile: str | None = None
    part_size: ByteSize = Field(default=ByteSize(64 * 1024 * 1024), ge=5 * 1024 * 1024)
    # ``auto``: lean requests and the endpoint cache, plus HTTP/1.1 pipelining of small GETs
    # for a custom ``endpoint_url`` (not for AWS); ``off``: botocore alone.
    fast_path: Literal["auto", "off"] = "auto"
    storage_class: S3StorageClass | None = None
    server_side_encryption: Literal["AES256", "aws:kms"] | None = None
    sse_kms_key_id: str | None = Field(default=None, min_length=1, max_length=2048)
    #: The bucket has S3 Object Lock: legal holds are set on its objects (checked at start).
    object_lock: bool = False

    @model_validator(mode="after")
    def _placement(self) -> S3Tier:
        if self.sse_kms_key_id is not None and self.server_side_encryption != "aws:kms":
            raise ValueError("sse_kms_key_id: needs server_side_encryption: aws:kms")
        if self.storage_class in S3_ARCHIVE_CLASSES:
            what = f"storage_class {self.storage_class} (S3 must restore an object before it is read)"
            if self.verify == "readback":
                raise ValueError(f"verify: readback cannot read back objects of {what}; use native")
            if self.scrub is not None:
                raise ValueError(f"scrub: cannot read objects of {what}")
        return self


#: The longest object name GCS takes, in bytes of its UTF-8.
GCS_MAX_NAME_BYTES = 1024
#: A resumable upload's chunks (all but the last) are multiples of this (GCS's rule).
GCS_CHUNK_QUANTUM = 256 * 1024
GCS_KMS_KEY = r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$"


class GcsTier(ObjectStoreTier):
    """A Google Cloud Storage bucket (or an emulator of the JSON API at ``endpoint_url``).

    Credentials, first found: ``credentials_file`` (a service account's JSON key or an
    ``authorized_user`` file), ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application default
    credentials, the metadata server of a GCE/GKE node. None at all for an emulator
    (``endpoint_url`` or ``STORAGE_EMULATOR_HOST``) without a ``credentials_file``.
    """

    max_name: ClassVar[int] = GCS_MAX_NAME_BYTES
    name_what: ClassVar[str] = "a GCS object name"

    kind: Literal["gcs"]
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://[^/?#]+/?$")
    verify_tls: bool = True
    credentials_file: Path | None = None
    #: Absent: the bucket's default class.
    storage_class: Literal["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"] | None = None
    kms_key_name: str | None = Field(default=None, pattern=GCS_KMS_KEY)
    #: Files bigger than this go up as resumable uploads in chunks of this size.
    chunk_size: ByteSize = Field(default=ByteSize(16 * 1024 * 1024), ge=GCS_CHUNK_QUANTUM, le=1024**3)

    @field_validator("chunk_size")
    @classmethod
    def _chunk_quantum(cls, size: ByteSize) -> ByteSize:
        if size % GCS_CHUNK_QUANTUM:
            raise ValueError(f"must be a multiple of 256 KiB ({GCS_CHUNK_QUANTUM:,} bytes): GCS's rule")
        return size


#: The longest blob name Azure takes, in characters (the prefix plus the file's path).
AZURE_MAX_NAME_CHARS = 1024
#: Azure's access tiers, as its API spells them.
AzureAccessTier = Literal["Hot", "Cool", "Cold", "Archive"]


class AzureTier(ObjectStoreTier):
    """An Azure Blob Storage container (block blobs), or an emulator such as Azurite.

    Credentials, first that is set: ``account_key``, ``sas_token``, else the Azure identity
    chain (``azure-identity``'s DefaultAzureCredential: managed identity, workload identity,
    environment, Azure CLI). ``endpoint_url`` replaces ``https://<account>.blob.core.windows.net``
    (Azurite, sovereign clouds). ``storage_class`` (the access tier) and ``encryption_scope`` go
    with every write; absent, the account's defaults apply.
    """

    max_name: ClassVar[int] = AZURE_MAX_NAME_CHARS
    name_unit: ClassVar[str] = "characters"
    name_what: ClassVar[str] = "a blob name"

    @classmethod
    def name_size(cls, name: str) -> int:
        """Azure counts a blob name's characters."""
        return len(name)

    kind: Literal["azure"]
    account: str = Field(pattern=r"^[a-z0-9]{3,24}$")
    container: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    account_key: SecretStr | None = None
    sas_token: SecretStr | None = None
    storage_class: AzureAccessTier | None = None
    encryption_scope: str | None = Field(default=None, pattern=r"^[A-Za-z0-9]{3,63}$")
    block_size: ByteSize = Field(default=ByteSize(16 * 1024 * 1024), ge=1024 * 1024, le=4000 * 1024 * 1024)

    @model_validator(mode="after")
    def _one_credential(self) -> AzureTier:
        if self.account_key is not None and self.sas_token is not None:
            raise ValueError("account_key, sas_token: give one credential, not both")
        return self

    @field_validator("container")
    @classmethod
    def _container_shape(cls, container: str) -> str:
        if "--" in container:
            raise ValueError("must not hold two dashes in a row (Azure refuses such container names)")
        return container

    @field_validator("sas_token")
    @classmethod
    def _sas_shape(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and "sig=" not in token.get_secret_value():
            raise ValueError("is not a SAS token (no sig= field)")
        return token


AnyTier = PosixTier | S3Tier | GcsTier | AzureTier
TierConfig = Annotated[AnyTier, Field(discriminator="kind")]
