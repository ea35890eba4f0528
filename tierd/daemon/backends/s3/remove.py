"""Removing many objects: DeleteObjects in batches of 1,000, completion markers in the first call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from tierd.daemon.backends.s3.errors import translate
from tierd.errors import PermanentBackendError

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import ErrorTypeDef

__all__ = ["DELETE_BATCH", "delete_keys"]

#: The most keys one DeleteObjects call takes.
DELETE_BATCH = 1000


async def delete_keys(client: S3Client, bucket: str, batches: Sequence[Sequence[str]], where: str) -> None:
    """Delete each batch of keys in turn (each split to DELETE_BATCH); a missing key is fine.

    Raises the tierd error of the first key the store refused to delete (Transient for
    throttling and 5xx, Permanent otherwise).
    """
    for keys in batches:
        for start in range(0, len(keys), DELETE_BATCH):
            chunk = keys[start : start + DELETE_BATCH]
            answer = await client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
            )
            refused = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if refused:
                raise _refusal(refused[0], len(refused), where)


def _refusal(first: ErrorTypeDef, count: int, where: str) -> Exception:
    code, message = first.get("Code", "Unknown"), first.get("Message", "")
    exc = ClientError({"Error": {"Code": code, "Message": message}}, "DeleteObjects")
    translated = translate(exc, "delete", f"{where}/{first.get('Key', '')} ({count} keys refused)")
    return translated or PermanentBackendError(f"delete {where}: {code} {message}")
