"""ls, show, tiers, audit, retention plan, reserve and status: their tables and their JSON."""

from __future__ import annotations

import re

from tests.unit.cli.conftest import BOTH, Cli


async def test_ls_shows_size_protection_and_replicas(cli: Cli) -> None:
    pinned = await cli.world.add(1, on=BOTH)
    held = await cli.world.add(2, on={"nvme": "verified", "pfs": "pending"}, run="team:exp")
    await cli("pin", str(pinned))
    await cli("hold", str(held), "--name", "case-9", "--reason", "legal")
    listed = await cli("ls")
    assert listed.lines == [
        "ID  RUN       STEP  STATE       SIZE  PROTECTION    REPLICAS",
        f" {held}  team:exp     2  complete  2.1 kB  held: case-9  nvme=verified pfs=pending",
        f" {pinned}  demo         1  complete  2.1 kB  pinned        nvme=verified pfs=verified",
    ]
    page = (await cli("ls", "--run", "demo", "--json")).json()
    assert [(c["id"], c["pinned"], c["holds"]) for c in page["items"]] == [(pinned, True, [])]
    first = await cli("ls", "--limit", "1")
    assert first.lines[-1] == "(1 of 2; --limit shows more)"


async def test_show_a_checkpoint_with_its_replicas_and_files(cli: Cli) -> None:
    cid = await cli.world.add(5, on=BOTH, metrics={"eval_loss": 1.25})
    await cli("pin", str(cid))
    await cli("hold", str(cid), "--name", "case-9", "--reason", "legal")
    shown = await cli("show", "demo:5")
    assert shown.code == 0
    lines = shown.lines
    assert lines[0] == f"checkpoint {cid} (demo:5)"
    assert "  state        complete (dcp)" in lines
    assert "  size         2.1 kB in 3 files" in lines
    assert "  pinned       yes" in lines
    assert any(
        re.fullmatch(r"  hold case-9  legal \(by api:admin-bot, [0-9-]+ [0-9:]+\)", line) for line in lines
    )
    assert "  metrics      eval_loss=1.25" in lines
    assert "  node loss    safe since 2026-01-01 00:05:00" in lines  # verified on pfs, a shared tier
    replicas = lines.index("TIER  STATE     VERIFIED (UTC)       DELETE AFTER (UTC)  NOTE")
    assert lines[replicas + 1 : replicas + 3] == [
        "nvme  verified  2026-01-01 00:05:00  -",
        "pfs   verified  2026-01-01 00:05:00  -",
    ]
    files = lines[lines.index("FILE                             SIZE  OWNER  MODE  CHECKSUM") + 1 :]
    assert [f.split()[:2] + f.split()[3:5] for f in files] == [
        ["demo/step00005/.metadata", "5", "-", "-"],
        ["demo/step00005/shard0.distcp", "1.0", "-", "-"],
        ["demo/step00005/shard1.distcp", "1.0", "-", "-"],
    ]
    body = (await cli("show", str(cid), "--json")).json()
    assert (body["id"], body["pinned"], body["metrics"]) == (cid, True, {"eval_loss": 1.25})
    assert len(body["files"]) == 3


async def test_show_names_each_files_owner_and_mode_at_first_sight(cli: Cli) -> None:
    cid = await cli.world.add(6, on=BOTH, owner=(1234, 5678, 0o640))
    lines = (await cli("show", str(cid))).lines
    files = lines[lines.index("FILE                             SIZE  OWNER      MODE  CHECKSUM") + 1 :]
    assert [f.split()[3:5] for f in files] == [["1234:5678", "0640"]] * 3
    body = (await cli("show", str(cid), "--json")).json()
    assert {(f["uid"], f["gid"], f["mode"]) for f in body["files"]} == {(1234, 5678, "0640")}


async def test_tiers(cli: Cli) -> None:
    await cli.world.add(1, on=BOTH)
    await cli.world.add(2, on={"nvme": "verified", "pfs": "pending"})
    shown = await cli("tiers")
    header, nvme, pfs = shown.lines
    assert header.split() == [
        "TIER", "KIND", "DURABLE", "POLICY", "DELAY", "SIZE", "FREE", "EVICT", "REPLICAS", "NEWEST", "AGE",
    ]  # fmt: skip
    assert re.fullmatch(
        r"nvme  posix  no   +keep_last  1h  +[0-9.]+ [kMGTPE]B  +[0-9.]+ [kMGTPE]B  -  +verified=2  +\S+",
        nvme,
    )
    assert pfs.split()[:5] == ["pfs", "posix", "yes", "keep_all", "1h"]
    assert "pending=1 verified=1" in pfs
    tiers = (await cli("tiers", "--json")).json()
    assert [(t["name"], t["durable"], t["replicas"]) for t in tiers] == [
        ("nvme", False, {"verified": 2}),
        ("pfs", True, {"pending": 1, "verified": 1}),
    ]


async def test_audit_of_one_checkpoint_and_pages(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    other = await cli.world.add(2, on=BOTH)
    await cli("pin", str(cid), "--reason", "golden")
    await cli("hold", str(cid), "--name", "case-9", "--reason", "legal")
    await cli("pin", str(other))
    events = await cli("audit", "demo:1")
    header, *rows = events.lines
    assert header.split() == ["ID", "AT", "(UTC)", "ACTOR", "ACTION", "CHECKPOINT", "TIER", "REASON"]
    assert [r.split()[3:] for r in rows] == [
        ["api:admin-bot", "hold", str(cid), "-", "legal"],
        ["api:admin-bot", "pin", str(cid), "-", "golden"],
    ]
    page = (await cli("audit", "--limit", "2", "--json")).json()
    assert [(e["action"], e["checkpoint_id"]) for e in page["items"]] == [("pin", other), ("hold", cid)]
    older = await cli("audit", "--limit", "2")
    assert older.lines[-1] == f"(older events: --before {page['next_before']})"
    rest = (await cli("audit", "--before", str(page["next_before"]), "--json")).json()
    assert [(e["action"], e["reason"]) for e in rest["items"]] == [("pin", "golden")]


async def test_retention_plan(cli: Cli) -> None:
    old = await cli.world.add(1, on=BOTH)
    new = await cli.world.add(2, on=BOTH)
    plan = await cli("retention", "plan", "--tier", "nvme", "--action", "delete")
    head, blank, tier, header, row = plan.lines
    assert re.fullmatch(r"retention plan at [0-9-]+ [0-9:]+ UTC \(a dry run\)", head)
    assert (blank, tier) == (
        "",
        "nvme (not durable, policy keep_last, delete delay 1h): keep 1, delete 1, blocked 0",
    )
    assert header.split() == ["ID", "RUN", "STEP", "REPLICA", "ACTION", "POLICY", "BACKED", "BY", "REASON"]
    assert row.split()[:7] == [str(old), "demo", "1", "verified", "delete", "keep_last", "pfs"]
    body = (await cli("retention", "plan", "--run", "demo", "--action", "keep", "--json")).json()
    kept = {t["tier"]: [i["checkpoint_id"] for i in t["items"]] for t in body["tiers"]}
    assert kept == {"nvme": [new], "pfs": [old, new]}
    assert body["dry_run"] is False


async def test_reserve_room_and_what_blocks_it(cli: Cli) -> None:
    await cli.world.add(1, on={"nvme": "verified", "pfs": "pending"})
    room = await cli("reserve", "nvme", "1kB")
    assert room.code == 0
    assert re.fullmatch(r"tier nvme: [0-9.]+ [kMGTPE]B free, 1\.0 kB wanted\n", room.out)
    body = (await cli("reserve", "nvme", "1KiB", "--json")).json()
    assert (body["tier"], body["wanted_free_bytes"], body["evicted"]) == ("nvme", 1024, [])

    refused = await cli("reserve", "nvme", "900PB")
    assert (refused.code, refused.out) == (1, "")
    first, header, row = refused.err.splitlines()
    assert first.startswith("tierd: HTTP 409: tier nvme: ")
    assert "kept: 1 checkpoint, 2.1 kB, " in first
    assert header.split() == ["CHECKPOINTS", "SIZE", "BLOCKER", "REASON"]
    assert row.split()[:4] == ["1", "2.1", "kB", "newest"]
    problem = (await cli("reserve", "nvme", "900PB", "--json")).json()
    assert problem["status"] == 409
    assert [(b["checkpoints"], b["blocker"]) for b in problem["blocked"]] == [(1, "newest")]
    assert cli.world.states(1) == {"nvme": "verified", "pfs": "pending"}

    unknown = await cli("reserve", "tape", "1GB")
    assert (unknown.code, unknown.err.startswith("tierd: HTTP 404: ")) == (1, True)


async def test_status(cli: Cli) -> None:
    ready = await cli("status")
    assert (ready.code, ready.out) == (0, f"ready (node {cli.world.config.node})\n")
    assert (await cli("status", "--json")).json()["status"] == "ready"


async def test_values_with_control_characters_are_printed_escaped(cli: Cli) -> None:
    """A run named before the API refused control characters (its files named after it on
    disk): an ESC would colour the terminal and a newline forge a row. Every view escapes them."""
    evil = "evil\x1b[31m\n 99  forged"
    cid = await cli.world.add(1, on=BOTH, run=evil)
    shown = "evil\\x1b[31m\\x0a 99  forged"
    for argv in (["ls"], ["show", str(cid)], ["runs"], ["retention", "plan"], ["audit", str(cid)]):
        result = await cli(*argv)
        assert result.code == 0, result.err
        assert not any(ch in result.out for ch in "\x1b\r\x7f"), argv
        assert not any(line.lstrip().startswith("99") for line in result.lines), argv
    listed = (await cli("ls")).lines
    assert len(listed) == 2
    assert f"  {shown}     1  complete" in listed[1]
    files = (await cli("show", str(cid))).out
    assert f"{shown}/step00001/.metadata" in files
    assert "\x1b" not in (await cli("ls", "--json")).out
    assert (await cli("ls", "--json")).json()["items"][0]["run"] == evil
