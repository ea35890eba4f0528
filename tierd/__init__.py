"""tierd: a checkpoint tiering daemon for ML training clusters.

- ``__main__``  ``python -m tierd``: the command line
- ``api/``       the HTTP API (FastAPI), its routes, schemas and errors
- ``cli/``       the ``tierd`` command line
- ``client/``    what a training job imports to talk to tierd (httpx and the standard library only)
- ``config/``    the configuration: one YAML file, overridden by ``TIERD_*`` environment variables
- ``daemon/``    everything that runs on the node
- ``integrations/`` tierd from inside PyTorch DCP, Lightning and Hugging Face ``transformers``
- ``migrations/`` the catalog's Alembic migrations
- ``errors``     every error tierd raises, in one hierarchy
- ``hidden``     optional packages hidden from the libraries that would load them for nothing
- ``keyring``    the bearer tokens the API accepts
- ``limits``     what one checkpoint step may expect, whoever says so
- ``logs``       structlog set-up: JSON lines, or readable lines on a terminal
- ``units``      sizes as people read them

Two distributions ship this package: ``tierd-client`` (``client/``: this file, ``errors``,
``client/`` and ``integrations/``, what a training job installs) and ``tierd`` (the rest,
requiring ``tierd-client`` at this version).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
