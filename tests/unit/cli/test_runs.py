"""``tierd runs`` and ``tierd latest``: their tables and their JSON."""

from __future__ import annotations

from tests.unit.cli.conftest import BOTH, Cli


async def test_runs_lists_newest_steps_per_tier(cli: Cli) -> None:
    await cli.world.add(1, on=BOTH)
    await cli.world.add(2, on={"nvme": "verified", "pfs": "copying"})
    await cli.world.add(9, on={"nvme": "verified"}, run="team:exp")
    listed = await cli("runs", role="read")
    assert listed.code == 0, listed.err
    assert listed.lines == [
        "RUN       CHECKPOINTS  NEWEST  NEWEST VERIFIED PER TIER",
        "demo                2       2  nvme=2 pfs=1",
        "team:exp            1       9  nvme=9 pfs=-",
    ]
    page = (await cli("runs", "--json", role="read")).json()
    assert [(r["run"], r["newest_step"]) for r in page["items"]] == [("demo", 2), ("team:exp", 9)]


async def test_latest_names_the_step_to_resume_from(cli: Cli) -> None:
    durable = await cli.world.add(1, on=BOTH)
    newest = await cli.world.add(2, on={"nvme": "verified", "pfs": "copying"})
    shown = await cli("latest", "demo", role="read")
    assert shown.lines == [f"checkpoint {newest} (demo:2) at demo/step00002 (verified on: nvme)"]
    body = (await cli("latest", "demo", "--durable", "--json", role="read")).json()
    assert (body["id"], body["step"]) == (durable, 1)
    on_tier = (await cli("latest", "demo", "--tier", "pfs", "--json", role="read")).json()
    assert on_tier["id"] == durable


async def test_latest_of_a_run_with_nothing_to_resume_from_fails(cli: Cli) -> None:
    missing = await cli("latest", "nobody", role="read")
    assert missing.code == 1
    assert "no run named 'nobody'" in missing.err
