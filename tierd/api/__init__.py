"""The HTTP API (FastAPI) and its errors (the CLI's client for it is :mod:`tierd.cli.http`)."""
