"""Logs are JSON lines when stderr is not a terminal, readable lines (coloured when asked) when it is."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest
import structlog
from structlog.types import EventDict

from tierd.logs import configure_logging, get_logger


def test_json_lines_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    try:
        when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        get_logger("tierd.test").info("checkpoint_recorded", run="demo", step=5, retry_at=when)
        logging.getLogger("uvicorn.error").warning("from the standard library")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    assert lines[0]["event"] == "checkpoint_recorded"
    assert (lines[0]["run"], lines[0]["step"], lines[0]["level"]) == ("demo", 5, "info")
    assert "timestamp" in lines[0]
    assert lines[0]["retry_at"] == "2026-01-02T03:04:05+00:00"
    assert lines[1]["event"] == "from the standard library"
    assert lines[1]["logger"] == "uvicorn.error"


def test_events_below_the_level_are_dropped_before_processing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stamped: list[str] = []
    original = structlog.processors.TimeStamper.__call__

    def counting(
        self: structlog.processors.TimeStamper, logger: object, name: str, event: EventDict
    ) -> EventDict:
        stamped.append(event["event"])
        return original(self, logger, name, event)

    monkeypatch.setattr(structlog.processors.TimeStamper, "__call__", counting)
    configure_logging("info", "json")
    try:
        log = get_logger("tierd.test.level")
        log.debug("file_copied", relpath="a")
        log.info("replica_verified")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    assert [line["event"] for line in lines] == ["replica_verified"]
    assert stamped == ["replica_verified"]


@pytest.mark.parametrize("colors", [True, False])
def test_readable_lines_are_coloured_only_when_asked(
    capsys: pytest.CaptureFixture[str], colors: bool
) -> None:
    configure_logging("info", "console", colors=colors)
    try:
        get_logger("tierd.test").info("checkpoint_recorded", run="demo")
        logging.getLogger("uvicorn.error").warning("from the standard library")
        err = capsys.readouterr().err
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    assert "checkpoint_recorded" in err
    assert "from the standard library" in err
    assert ("\x1b[" in err) is colors
