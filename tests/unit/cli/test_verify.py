"""``tierd verify``: every replica re-checked now, the result per tier, exit 1 when one is bad."""

from __future__ import annotations

from tests.unit.cli.conftest import BOTH, Cli, Result
from tests.unit.scrub.helpers import flip_byte, relpaths


def printed(result: Result) -> list[str]:
    """What the command printed (the API serving it logs on the same stdout, before)."""
    start = next(i for i, line in enumerate(result.lines) if line.startswith("checkpoint "))
    return result.lines[start:]


async def test_verify_a_good_checkpoint(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    result = await cli("verify", "demo:1", role="operate")
    assert (result.code, result.err) == (0, "")
    lines = printed(result)
    assert lines[0] == f"checkpoint {cid}: ok"
    assert [line.split() for line in lines[1:]] == [
        ["TIER", "RESULT", "NOTE"],
        ["nvme", "ok"],
        ["pfs", "ok"],
    ]


async def test_verify_a_rotten_replica_exits_1_and_names_the_file(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    bad = relpaths(cli.world, cid)[-1]
    flip_byte(cli.world.tier_path("pfs", bad))
    result = await cli("verify", str(cid), role="operate")
    assert result.code == 1
    lines = printed(result)
    assert lines[0] == f"checkpoint {cid}: bad replicas found (marked failed, copied again)"
    assert lines[3].split() == ["pfs", "mismatch", bad, "(mismatch)"]
    assert cli.world.states(cid)["pfs"] == "failed"

    as_json = await cli("verify", str(cid), "--json", role="operate")
    body = as_json.json()
    assert (as_json.code, body["checkpoint_id"], body["ok"]) == (0, cid, True)  # failed: skipped now
    assert [t["result"] for t in body["tiers"]] == ["ok", "skipped"]


async def test_verify_needs_operate_and_an_existing_checkpoint(cli: Cli) -> None:
    await cli.world.add(1, on=BOTH)
    refused = await cli("verify", "demo:1", role="read")
    assert refused.code != 0
    assert "needs operate" in refused.err
    missing = await cli("verify", "demo:9", role="operate")
    assert missing.code != 0
    assert "no checkpoint at step 9" in missing.err
