"""Naming a checkpoint by id or RUN:STEP, and what the CLI says when it cannot."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from pathlib import Path

import pytest
import yaml

from tests.conftest import posix_config_dict
from tests.unit.cli.conftest import BOTH, TOKENS, Cli
from tierd.cli.main import main
from tierd.cli.remote import CheckpointRef, checkpoint_ref


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("7", CheckpointRef("7", id=7)),
        ("demo:100", CheckpointRef("demo:100", run="demo", step=100)),
        ("team:exp:1:100", CheckpointRef("team:exp:1:100", run="team:exp:1", step=100)),
        ("42:3", CheckpointRef("42:3", run="42", step=3)),
        (f"{2**63 - 1}", CheckpointRef(f"{2**63 - 1}", id=2**63 - 1)),
    ],
)
def test_an_id_or_run_and_step_split_on_the_last_colon(text: str, ref: CheckpointRef) -> None:
    assert checkpoint_ref(text) == ref


@pytest.mark.parametrize(
    "text", ["demo", "demo:", ":5", "demo:x", "-1", "demo:-1", f"{2**63}", f"d:{2**63}", "٣"]
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="neither a checkpoint id nor RUN:STEP"):
        checkpoint_ref(text)


def test_a_bad_reference_or_size_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["pin", "demo", "--url", "http://127.0.0.1:9"])
    assert exited.value.code == 2
    assert "'demo' is neither a checkpoint id nor RUN:STEP" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["reserve", "nvme", "lots", "--url", "http://127.0.0.1:9"])
    assert exited.value.code == 2
    assert "'lots' is not a size" in capsys.readouterr().err


async def test_run_names_with_a_colon_resolve_to_their_own_checkpoint(cli: Cli) -> None:
    plain = await cli.world.add(1, on=BOTH, run="a")
    colon = await cli.world.add(2, on=BOTH, run="a:1")
    numeric = await cli.world.add(3, on=BOTH, run="42")
    assert (await cli("show", "a:1", "--json")).json()["id"] == plain
    assert (await cli("show", "a:1:2", "--json")).json()["id"] == colon
    assert (await cli("show", "42:3", "--json")).json()["id"] == numeric
    pinned = await cli("pin", "a:1:2")
    assert pinned.out == f"checkpoint {colon} (a:1:2): pinned\n"
    assert [cli.world.checkpoint(c).pinned for c in (plain, colon, numeric)] == [False, True, False]


async def test_an_unknown_run_and_step_is_a_clear_error(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    missing = await cli("pin", "demo:77")
    assert (missing.code, missing.out) == (1, "")
    assert missing.err == "tierd: run 'demo' has no checkpoint at step 77\n"
    other_run = await cli("delete", "nope:1", "--reason", "x")
    assert other_run.err == "tierd: run 'nope' has no checkpoint at step 1\n"
    assert not cli.world.checkpoint(cid).pinned
    assert cli.world.states(cid) == BOTH


async def test_an_unknown_id_is_the_apis_404(cli: Cli) -> None:
    missing = await cli("show", "999")
    assert (missing.code, missing.out, missing.err) == (
        1,
        "",
        "tierd: HTTP 404: checkpoint 999 does not exist\n",
    )
    problem = await cli("undelete", "999", "--json")
    assert problem.code == 1
    assert (problem.json()["status"], problem.json()["detail"]) == (404, "checkpoint 999 does not exist")
    no_hold = await cli("release", "999", "--name", "case-9")
    assert no_hold.err == "tierd: HTTP 404: checkpoint 999 does not exist\n"
    cid = await cli.world.add(1, on=BOTH)
    unknown_hold = await cli("release", str(cid), "--name", "case-9")
    assert unknown_hold.err == f"tierd: HTTP 404: checkpoint {cid} has no hold named 'case-9'\n"


def test_an_unreachable_daemon_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as bound_not_listening:
        bound_not_listening.bind(("127.0.0.1", 0))
        port = bound_not_listening.getsockname()[1]
        assert main(["tiers", "--url", f"http://127.0.0.1:{port}"]) == 1
    assert capsys.readouterr().err.startswith(f"tierd: cannot reach tierd at http://127.0.0.1:{port}: ")


async def test_without_url_the_cli_asks_the_configs_api_listen(cli: Cli, tmp_path: Path) -> None:
    port = int(cli.url.rsplit(":", 1)[1])
    tokens = [{"name": "reader", "token": TOKENS["read"], "role": "read"}]  # no anonymous 0.0.0.0
    config = posix_config_dict(tmp_path / "other", api={"listen": f"0.0.0.0:{port}", "tokens": tokens})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cli.capsys.readouterr()
    code = await asyncio.to_thread(
        main, ["tiers", "--config", str(path), "--token", TOKENS["read"], "--json"]
    )
    assert code == 0
    assert [t["name"] for t in json.loads(cli.capsys.readouterr().out)] == ["nvme", "pfs"]
