"""Legal holds S3 itself enforces (Object Lock), for ``S3Backend``.

A tier with ``object_lock: true`` is checked at start (``check_legal_hold``:
GetObjectLockConfiguration must say ``Enabled``), so a config that promises holds the store
would not keep fails loudly instead of silently. ``set_legal_hold`` sends
PutObjectLegalHold for each object's current version, a few at a time. S3 then refuses to
delete a held version (DeleteObject with its VersionId, from tierd or from anyone holding
the bucket's credentials) until the hold is cleared. A DeleteObject without a VersionId,
as tierd's own deletes are, only adds a delete marker in a versioned bucket (Object Lock
needs versioning): the held version stays.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from botocore.exceptions import ClientError

from tierd.config import S3Tier
from tierd.daemon.backends.base import Backend
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.s3.errors import s3_errors
from tierd.errors import ConfigError

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

__all__ = ["HOLD_REQUESTS", "S3Holds"]

#: PutObjectLegalHold requests of one call in flight at once.
HOLD_REQUESTS = 16
_NO_LOCK = "ObjectLockConfigurationNotFoundError"


class S3Holds(Backend):
    """The legal holds of an S3 tier; ``S3Backend`` gives it the client and the keys."""

    tier: S3Tier
    bucket: str

    @abstractmethod
    async def client(self) -> S3Client:
        """The shared aiobotocore client, opened on first use."""

    @abstractmethod
    def _key(self, relpath: str) -> str:
        """The object key of ``relpath``; PermanentBackendError for one S3 would refuse."""

    @abstractmethod
    def location_of_key(self, key: str) -> str:
        """``s3://bucket/key``."""

    async def check_legal_hold(self) -> None:
        """GetObjectLockConfiguration: ConfigError unless the bucket has Object Lock enabled.

        Raises PermanentBackendError (access denied, no such bucket) or TransientBackendError.
        """
        client = await self.client()
        where = self.location_of_key("")
        with s3_errors("get the Object Lock configuration of", where):
            try:
                answer = await client.get_object_lock_configuration(Bucket=self.bucket)
                status = answer.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled")
            except ClientError as exc:
                if _code(exc) != _NO_LOCK:
                    raise
                status = None
        if status != "Enabled":
            raise ConfigError(
                [
                    f"tier {self.name}: object_lock: true, but bucket {self.bucket} has no Object Lock"
                    " enabled (it is set when the bucket is created: see docs/operations.md)"
                ]
            )

    async def set_legal_hold(self, relpaths: Sequence[str], on: bool) -> None:
        """PutObjectLegalHold ON (or OFF) on each object's current version.

        Raises NotFound for a missing object, PermanentBackendError (access denied, Object
        Lock not enabled) or TransientBackendError.
        """
        client = await self.client()
        status: Literal["ON", "OFF"] = "ON" if on else "OFF"

        async def send(relpath: str) -> None:
            key = self._key(relpath)
            with s3_errors(f"set the legal hold {status} on", self.location_of_key(key)):
                await client.put_object_legal_hold(Bucket=self.bucket, Key=key, LegalHold={"Status": status})

        await for_each(relpaths, send, HOLD_REQUESTS)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
