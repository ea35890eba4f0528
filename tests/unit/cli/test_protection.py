"""pin, unpin, hold, release, delete and undelete from the command line, checked in the catalog."""

from __future__ import annotations

from tests.unit.cli.conftest import BOTH, Cli, hold_names


async def test_pin_and_unpin(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    pinned = await cli("pin", str(cid), "--reason", "golden")
    assert (pinned.code, pinned.out, pinned.err) == (0, f"checkpoint {cid} (demo:1): pinned\n", "")
    assert cli.world.checkpoint(cid).pinned
    assert cli.world.actions(cid)[-1] == ("pin", None)

    unpinned = await cli("unpin", "demo:1", "--json")
    assert unpinned.code == 0
    body = unpinned.json()
    assert (body["id"], body["pinned"]) == (cid, False)
    assert not cli.world.checkpoint(cid).pinned

    again = await cli("pin", "demo:1", "--json")
    assert again.json()["pinned"] is True
    human = await cli("unpin", str(cid))
    assert human.out == f"checkpoint {cid} (demo:1): unpinned\n"


async def test_hold_and_release(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    held = await cli("hold", "demo:1", "--name", "case-9", "--reason", "litigation")
    assert held.out == f"checkpoint {cid} (demo:1): hold case-9 set (held: case-9)\n"
    second = await cli("hold", str(cid), "--name", "case-10", "--reason", "audit", "--json")
    assert [(h["name"], h["reason"], h["actor"]) for h in second.json()["holds"]] == [
        ("case-10", "audit", "api:admin-bot"),
        ("case-9", "litigation", "api:admin-bot"),
    ]
    assert hold_names(cli.world, cid) == ["case-10", "case-9"]

    unpinned = await cli("unpin", str(cid))
    assert unpinned.out == f"checkpoint {cid} (demo:1): unpinned (still held: case-10, case-9)\n"
    released = await cli("release", str(cid), "--name", "case-9", "--reason", "settled")
    assert released.out == f"checkpoint {cid} (demo:1): hold case-9 released (still held: case-10)\n"
    last = await cli("release", "demo:1", "--name", "case-10")
    assert last.out == f"checkpoint {cid} (demo:1): hold case-10 released (no holds left)\n"
    assert hold_names(cli.world, cid) == []
    assert [a for a, _ in cli.world.actions(cid)][-4:] == ["hold", "hold", "release", "release"]


async def test_release_json_and_holds_need_admin(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    refused = await cli("hold", str(cid), "--name", "case-9", "--reason", "legal", role="operate")
    assert refused.code == 1
    assert refused.err.startswith("tierd: HTTP 403: ")
    assert "needs admin" in refused.err
    assert hold_names(cli.world, cid) == []
    await cli("hold", str(cid), "--name", "case-9", "--reason", "legal")
    released = await cli("release", str(cid), "--name", "case-9", "--json")
    assert released.json()["holds"] == []
    assert hold_names(cli.world, cid) == []


async def test_a_hold_refuses_delete_with_409_then_delete_and_undelete(cli: Cli) -> None:
    cid = await cli.world.add(1, on=BOTH)
    await cli("hold", str(cid), "--name", "case-9", "--reason", "legal")
    refused = await cli("delete", "demo:1", "--reason", "cleanup")
    assert (refused.code, refused.out) == (1, "")
    assert refused.err == f"tierd: HTTP 409: checkpoint {cid} is under legal hold (case-9)\n"
    assert cli.world.states(cid) == BOTH

    await cli("release", str(cid), "--name", "case-9")
    deleted = await cli("delete", "demo:1", "--reason", "bad run")
    assert deleted.code == 0
    head, header, *rows = deleted.lines
    assert (
        head == f"checkpoint {cid} (demo:1): deletion scheduled; `tierd undelete {cid}` cancels it until then"
    )
    assert header.split() == ["TIER", "STATE", "DELETE", "AFTER", "(UTC)"]
    assert [r.split()[:2] for r in rows] == [["nvme", "deleting"], ["pfs", "deleting"]]
    assert cli.world.states(cid) == {"nvme": "deleting", "pfs": "deleting"}
    assert cli.world.replica(cid, "nvme").delete_reason == "api: bad run (by api:admin-bot)"

    undone = await cli("undelete", str(cid), "--reason", "oops")
    assert undone.out == (
        f"checkpoint {cid} (demo:1): deletion cancelled; "
        f"now pinned (`tierd unpin {cid}` gives it back to retention)\n"
    )
    assert cli.world.states(cid) == BOTH
    assert cli.world.checkpoint(cid).pinned
    nothing = await cli("undelete", str(cid))
    assert (nothing.code, nothing.err) == (
        1,
        f"tierd: HTTP 409: checkpoint {cid} has no deletion left to cancel\n",
    )


async def test_delete_and_undelete_json(cli: Cli) -> None:
    cid = await cli.world.add(3, on=BOTH)
    deleted = await cli("delete", str(cid), "--reason", "bad run", "--json")
    replicas = {r["tier"]: r for r in deleted.json()["replicas"]}
    assert {r["state"] for r in replicas.values()} == {"deleting"}
    assert replicas["nvme"]["delete_after"] is not None
    undone = await cli("undelete", "demo:3", "--json")
    assert undone.json()["pinned"] is True
    assert {r["state"] for r in undone.json()["replicas"]} == {"verified"}
    pinned = await cli("delete", str(cid), "--reason", "again", "--json")
    assert pinned.code == 1
    assert pinned.json()["status"] == 409
    assert pinned.json()["detail"] == f"checkpoint {cid} is pinned: unpin it first"
    assert pinned.err == f"tierd: HTTP 409: checkpoint {cid} is pinned: unpin it first\n"
    assert cli.world.states(cid) == BOTH
