"""How a file's bytes go up: one Put Blob up to ``PUT_LIMIT``, staged blocks above it.

The body of either is the budget's buffer the bytes were read and hashed in, sent on
``httpwire`` (``AzureRest.put``) in slices, each drained before the next; a retry sends it
whole once more. The buffer stays charged to the budget until the service answered.
"""

from __future__ import annotations

from tierd.daemon.backends.budget import MIB

__all__ = ["PUT_LIMIT"]

#: Files up to this size go up in one Put Blob; bigger ones as blocks.
PUT_LIMIT = 1 * MIB
