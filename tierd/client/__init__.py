"""What a training job imports to talk to tierd: httpx and the standard library only.

::

    from tierd.client import Client

    tierd = Client()                      # $TIERD_URL (default http://127.0.0.1:8470), $TIERD_TOKEN
                                          # https://: $TIERD_CA_FILE, else the system's CAs
    tierd.notify("llama", 1000, "/nvme/ckpt/llama/step_1000", metrics={"eval_loss": 1.92})
    tierd.wait_durable("llama", 1000, timeout=600)
    path = tierd.ensure_local("llama", "latest", "/nvme/ckpt/llama/resume")

:class:`AsyncClient` has the same methods, as coroutines. Every operation is written once, as a
generator that yields what it needs done (an HTTP call, a pause, a look at the local disk), and
each client runs it with its own I/O. Errors are tierd's: :class:`~tierd.errors.ApiError` (the
problem's status and detail), :class:`~tierd.errors.Unreachable`, :class:`~tierd.errors.WaitTimeout`,
:class:`~tierd.errors.NotFound` (nothing to resume from) and :class:`~tierd.errors.TierdError`
(a restore that failed or was cancelled); over HTTPS, :class:`~tierd.errors.Untrusted` (the
daemon's certificate is not signed by a CA the client trusts). :func:`tls_context` makes the
context a client checks certificates with, and presents a client certificate from.

Modules:

- ``ops``: every operation, written once as a generator of what it needs done.
- ``sync``: :class:`Client`, which runs them with blocking I/O.
- ``asynchronous``: :class:`AsyncClient`, which runs them as coroutines.
- ``wire``: what both do alike: settings and TLS, the wait a busy daemon asks for, answers and errors.
"""

from tierd.client.asynchronous import AsyncClient
from tierd.client.ops import JsonObject, Progress
from tierd.client.sync import Client
from tierd.client.wire import BUSY_RETRIES, DEFAULT_URL, tls_context

__all__ = ["BUSY_RETRIES", "DEFAULT_URL", "AsyncClient", "Client", "JsonObject", "Progress", "tls_context"]
