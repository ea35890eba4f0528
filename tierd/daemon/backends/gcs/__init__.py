"""The Google Cloud Storage tier: the JSON API on httpx and its own connections (no google-cloud-storage).

``backend`` (``GcsBackend``, ``GcsReader``: stat, list, ranged reads, verify from the stored
checksums), ``writes`` (one multipart request or a resumable session, CRC32C declared,
sessions recorded to resume), ``objects`` (the metadata kept with an object: CRC64NVME,
CRC32C, owner), ``client`` (URLs, the httpx client for metadata, listings, sessions and
deletes, and the one mapping of answers to errors), ``media`` (the data path's media GETs
and multipart uploads on ``backends.httpwire``'s own HTTP/1.1 connections: less time per
request than httpx, less CPU than aiohttp), ``auth``
(service account, authorized user, metadata server, or none for an emulator).

Why not the official library: docs/data-path.md ("GCS") has the measurement.
"""

from tierd.daemon.backends.gcs.backend import GcsBackend, GcsReader

__all__ = ["GcsBackend", "GcsReader"]
