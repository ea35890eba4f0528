"""An Azure Blob Storage tier: block blobs through ``azure-storage-blob``'s async client.

``backend`` (the tier: stat, list, reads, writes, verification, leftovers), ``blocks``
(big files as blocks staged in parallel with their CRC64, resumed from the service's
uncommitted block list, then committed), ``reads`` (ranged GETs pinned to an ETag,
read-back hashing), ``bodies`` (a block's buffer as the request body, sent without a
copy), ``leftovers`` (blobs holding only staged blocks, found and dropped),
``metadata`` (the CRC64NVME, owner and mode kept as blob metadata), ``client`` (the
container client: URL, credential, retries), ``errors`` (the one boundary where azure-core
and aiohttp errors become tierd errors).
"""

from tierd.daemon.backends.azure.backend import AzureBackend

__all__ = ["AzureBackend"]
