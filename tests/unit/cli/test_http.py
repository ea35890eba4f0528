"""The CLI's HTTP client and the CLI over it: API problems arrive as ``tierd.errors.ApiError``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.fixtures.served_api import ServedApi
from tierd.cli.http import DaemonApi
from tierd.cli.main import main
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.errors import ApiError, TierdError


@pytest.fixture
def served(sqlite_db: Database, make_config: Callable[..., Config]) -> Iterator[ServedApi]:
    config = make_config(
        api={"listen": "127.0.0.1:0", "tokens": [{"name": "viewer", "token": "v", "role": "read"}]}
    )
    with ServedApi(Context(config=config, db=sqlite_db, watcher_running=True)) as api:
        yield api


def test_a_problem_becomes_an_api_error_with_its_status_and_detail(served: ServedApi) -> None:
    with DaemonApi(served.base_url, token="v") as client:
        assert client.checkpoints()["total"] == 0
        with pytest.raises(ApiError) as missing:
            client.checkpoint(999)
    assert isinstance(missing.value, TierdError)
    assert (missing.value.status, missing.value.detail) == (404, "checkpoint 999 does not exist")
    assert not missing.value.retryable
    with DaemonApi(served.base_url) as anonymous, pytest.raises(ApiError) as denied:
        anonymous.checkpoints()
    assert (denied.value.status, denied.value.detail) == (401, "a bearer token is required")


def test_a_draining_daemon_is_worth_asking_again(served: ServedApi) -> None:
    served.ctx.draining = True
    with DaemonApi(served.base_url) as client, pytest.raises(ApiError) as draining:
        client.ready()
    assert draining.value.status == 503
    assert draining.value.detail == "draining for shutdown"
    assert draining.value.retryable


def test_the_cli_reports_an_api_error_and_exits_1(
    served: ServedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "999", "--url", served.base_url, "--token", "v"]) == 1
    assert capsys.readouterr().err == "tierd: HTTP 404: checkpoint 999 does not exist\n"
