"""The HTTP API (FastAPI) and its errors (the CLI's client for it is :mod:`tierd.cli.http`).

- ``app``        the FastAPI application: thin routes over the services the daemon runs
- ``server``     uvicorn as a daemon service, on a socket tierd binds
- ``tls``        the server's TLS context from ``api.tls``, checked at start
- ``routes/``    one APIRouter per resource
- ``schemas/``   the JSON shapes, in and out, one module per resource
- ``deps``       FastAPI dependencies: the daemon context, the catalog session, bearer-token roles
- ``gate``       what is refused on a request's headers alone, before its body is read
- ``admission``  a bound on the API's work, so clients that give up cannot stall it
- ``rawbody``    a big upload's body read straight off its connection (the peer tier's files)
- ``access``     the access log: one line per request, its route's template and its caller's token name
- ``bounds``     the bounds every input is checked against
- ``problems``   RFC 9457 problem details: every error is ``application/problem+json``
- ``openapi``    the OpenAPI document describes itself: each operation's role, summary, tag
- ``docs``       ``/v1/docs``: Swagger UI, its files served by the daemon (no CDN)
"""
