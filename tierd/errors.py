"""Every error tierd raises, in one hierarchy.

::

    TierdError                      base; ``retryable`` says whether trying again may help
    ├── ConfigError                 the config file or an override is invalid (names the key)
    ├── CatalogError                the catalog cannot be used
    │   └── SchemaError             the schema is missing, old or newer than this build
    ├── NotFound                    a checkpoint, replica or object does not exist
    ├── Conflict                    the request contradicts the current state
    ├── NotifyRejected              a notify names a path tierd cannot record (outside tier 0, missing)
    ├── RestoreRefused              a restore would write outside the allowed roots, or over files
    ├── Unstable                    files changed while hashed: record nothing, look again later (retryable)
    ├── Refused                     a checkpoint holds what tierd will not read (symlink, FIFO, device,
    │                               hard link) or a name it cannot carry: record nothing
    ├── BackendError                a tier refused or failed an operation
    │   ├── TransientBackendError   network blips, throttling, 5xx: retryable
    │   │   └── NoSpace             the tier's file system or quota is full (retryable: space may return)
    │   └── PermanentBackendError   access denied, no such bucket, bad request: not retryable
    │       └── ObjectArchived      the object sits in an archive storage class: rehydrate it first
    ├── IntegrityError              bytes do not match the checksum recorded at first sight
    ├── ShuttingDown                the daemon is draining and takes no new work
    ├── ApiError                    the HTTP API answered a problem: its status and detail (client side;
    │                               retryable for 408, 429, 502, 503 and 504)
    ├── Unreachable                 the daemon's API could not be reached (client side; retryable)
    ├── Untrusted                   the daemon's TLS certificate failed verification (client side)
    └── WaitTimeout                 a wait (``tierd.client``'s ``wait_durable``) ran out of time (retryable)

Third-party errors (botocore, ``OSError``, SQLAlchemy) are translated into these at one
boundary per component, so the rest of tierd only ever sees tierd errors. The API answers
each with a status (``tierd.api.problems``): NotFound 404, Conflict 409, NotifyRejected and
RestoreRefused 422, CatalogError and ShuttingDown 503.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "BackendError",
    "CatalogError",
    "ConfigError",
    "Conflict",
    "IntegrityError",
    "NoSpace",
    "NotFound",
    "NotifyRejected",
    "ObjectArchived",
    "PermanentBackendError",
    "Refused",
    "RestoreRefused",
    "SchemaError",
    "ShuttingDown",
    "TierdError",
    "TransientBackendError",
    "Unreachable",
    "Unstable",
    "Untrusted",
    "WaitTimeout",
]


class TierdError(Exception):
    """Base of every tierd error."""

    retryable: bool = False


class ConfigError(TierdError):
    """The configuration is invalid; the message names the key and the reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))


class CatalogError(TierdError):
    """The catalog database cannot be reached or used."""

    retryable = True


class CatalogConflict(CatalogError):
    """A write lost to a concurrent one on a unique key (the catalog itself is fine)."""


class SchemaError(CatalogError):
    """The catalog schema does not match this build; the message says what to run."""

    retryable = False


class NotFound(TierdError):
    """The named checkpoint, replica, file or object does not exist."""


class Conflict(TierdError):
    """The request contradicts the current state (e.g. deleting a pinned checkpoint)."""


class NotifyRejected(TierdError):
    """A notify names a path tierd cannot record (outside tier 0, its root, or missing)."""


class RestoreRefused(TierdError):
    """A restore would write outside the allowed roots, through a symlink, or over existing files."""


class Unstable(TierdError):
    """A file changed while it was being hashed; record nothing and look again later."""

    retryable = True


class Refused(TierdError):
    """A checkpoint holds entries tierd will not read, or names it cannot carry; nothing is recorded.

    ``offending`` lists them (``{"path": ..., "kind": ...}``, printable), ``count`` says how many there are.
    """

    def __init__(self, reason: str, offending: list[dict[str, str]], count: int) -> None:
        self.offending = offending
        self.count = count
        super().__init__(reason)


class BackendError(TierdError):
    """A storage tier failed an operation."""


class TransientBackendError(BackendError):
    """A failure that may succeed if retried (timeouts, throttling, 5xx)."""

    retryable = True


class NoSpace(TransientBackendError):
    """The tier's file system or quota is full (ENOSPC, EDQUOT).

    Retryable: retention, eviction or an operator may free space before the next try.
    """


class PermanentBackendError(BackendError):
    """A failure that retrying will not fix (access denied, missing bucket)."""


class ObjectArchived(PermanentBackendError):
    """The object sits in an archive storage class: the store must rehydrate it before a read."""


class IntegrityError(TierdError):
    """Bytes read do not match the checksum recorded at first sight.

    ``expected`` and ``actual`` are the two checksums when the mismatch is one of checksums.
    """

    retryable = True

    def __init__(self, message: str, *, expected: str | None = None, actual: str | None = None) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(message)


class ShuttingDown(TierdError):
    """The daemon is draining and accepts no new work."""

    retryable = True


class ApiError(TierdError):
    """The tierd API answered with an error; ``detail`` is its problem+json ``detail``.

    ``problem`` is the whole problem+json body when there was one (a reservation's 409 lists
    what blocks it there).
    """

    #: Statuses that say "not now" rather than "not this request": timeouts, rate limits,
    #: an unreachable or draining daemon behind a proxy.
    RETRYABLE_STATUSES = frozenset({408, 429, 502, 503, 504})

    def __init__(self, status: int, detail: str, problem: dict[str, Any] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.problem = problem
        self.retryable = status in self.RETRYABLE_STATUSES
        super().__init__(f"HTTP {status}: {detail}")


class Unreachable(TierdError):
    """The daemon's API could not be reached (refused, reset, timed out): try again later."""

    retryable = True


class Untrusted(TierdError):
    """The daemon's TLS certificate is not signed by a CA the client trusts, or names another host.

    Not retryable: give the client the CA that signed it (``ca_file``, ``$TIERD_CA_FILE``).
    """


class WaitTimeout(TierdError):
    """What a client waited for did not happen in time (e.g. a step becoming durable)."""

    retryable = True
