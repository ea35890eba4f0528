"""An Azure Blob Storage tier: block blobs, every request on tierd's own HTTP clients.

``backend`` (the tier: stat, list, reads, writes, verification, leftovers), ``blocks``
(big files as blocks staged in parallel with their CRC64, resumed from the service's
uncommitted block list, then committed), ``reads`` (ranged GETs pinned to an ETag, small
blobs read whole in one GET, read-back hashing), ``rest`` (every request signed and sent:
blob GETs, Put Blob and Put Block on ``httpwire``'s kept connections, the rest on an aiohttp
session; bodies straight into and out of budget buffers), ``puts`` (Put Blob and Put Block),
``calls`` (properties, block lists, commits, deletes and listings, their XML parsed with the
standard library), ``bodies`` (the single-put limit), ``leftovers`` (blobs holding only
staged blocks, found and dropped), ``metadata`` (the CRC64NVME, owner and mode kept as blob
metadata), ``client`` (the account URL and the credential: key, SAS token or the identity
chain), ``errors`` (the one boundary where azure-core and aiohttp errors and the service's
answers become tierd errors).
"""

from tierd.daemon.backends.azure.backend import AzureBackend

__all__ = ["AzureBackend"]
