"""structlog set-up: JSON lines when stderr is not a terminal, readable lines when it is.

structlog is loaded here with rich and pygments hidden, even where they are installed (the
dev extra brings them): structlog imports rich, when it can, only to draw exceptions on a
terminal, and draws them with its plain formatter instead. httpx imports rich and pygments
(and click) for its own command line (``httpx._main``), which tierd never runs: that module
is hidden for good (``tierd.hidden``) once this one is imported, so httpx loads without them
whenever it is imported: by the CLI's commands that call the API, a GCS tier, and the peer
clients the replication and restore services import in every daemon. The CLI imports this
module first (``tierd.cli.main``), so nothing loads httpx before it. With the attrs rich
pulls in they took ~5 MB of every daemon's resident memory (89 modules).
"""

from __future__ import annotations

import logging
import sys
from datetime import date, datetime
from typing import Literal

from tierd.hidden import hidden, hidden_for_good

__all__ = ["HTTPX_CLI", "TERMINAL_EXTRAS", "configure_logging", "get_logger", "set_level"]

#: What structlog would import, when installed, for terminal output tierd does not use.
TERMINAL_EXTRAS = ("rich", "pygments", "better_exceptions")
#: httpx's command line, which it imports (with click, rich and pygments) whenever it can.
HTTPX_CLI = "httpx._main"

hidden_for_good(HTTPX_CLI)
with hidden(*TERMINAL_EXTRAS):
    import structlog

get_logger = structlog.get_logger


def configure_logging(
    level: str = "info", fmt: Literal["auto", "json", "console"] = "auto", *, colors: bool = False
) -> None:
    """Configure structlog and route the standard library's logs (uvicorn, alembic) through it.

    ``colors``: whether readable lines are coloured (the CLI decides: ``tierd.cli.terminal``).
    """
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: structlog.types.Processor = structlog.dev.ConsoleRenderer(colors=colors)
    if as_json:
        renderer = structlog.processors.JSONRenderer(default=_json_default)
    structlog.configure(
        # Events below the level are dropped before any processor runs (time stamps cost ~10 us).
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info if as_json else _identity,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "alembic"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    for noisy in ("botocore", "aiobotocore", "watchdog", "urllib3", "alembic", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def set_level(level: str) -> None:
    """Log events at ``level`` and above from now on (a reload's ``log.level``)."""
    logging.getLogger().setLevel(level.upper())


def _json_default(value: object) -> str:
    """Timestamps as ISO 8601; anything else JSON cannot hold as its ``str``."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _identity(logger: object, name: str, event: structlog.types.EventDict) -> structlog.types.EventDict:
    return event
