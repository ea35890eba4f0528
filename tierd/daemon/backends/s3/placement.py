"""Where and how S3 keeps what a tier writes: its storage class and server-side encryption.

The tier's ``storage_class``, ``server_side_encryption`` and ``sse_kms_key_id`` go with
every request that makes an object: PutObject (botocore's or the lean one), the multipart
upload's creation, and CopyObject (whose destination would otherwise take S3's defaults,
not the source's). A bucket policy that denies unencrypted writes is then satisfied on every
path. A key that is absent sends nothing: the bucket's default applies.
"""

from __future__ import annotations

from tierd.config import S3Tier

__all__ = ["HEADERS", "placement_headers", "placement_params"]

#: botocore's parameter -> the request header it becomes.
HEADERS = {
    "StorageClass": "x-amz-storage-class",
    "ServerSideEncryption": "x-amz-server-side-encryption",
    "SSEKMSKeyId": "x-amz-server-side-encryption-aws-kms-key-id",
}


def placement_params(tier: S3Tier) -> dict[str, str]:
    """The parameters botocore takes for a request that writes an object of ``tier`` (those set)."""
    values = {
        "StorageClass": tier.storage_class,
        "ServerSideEncryption": tier.server_side_encryption,
        "SSEKMSKeyId": tier.sse_kms_key_id,
    }
    return {name: value for name, value in values.items() if value is not None}


def placement_headers(tier: S3Tier) -> list[tuple[str, str]]:
    """The same as request headers, for a request tierd signs itself (``fast.lean``)."""
    return [(HEADERS[name], value) for name, value in placement_params(tier).items()]
