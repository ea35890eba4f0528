"""The checkpoint lifecycle end to end, with the real daemon (``python -m tierd run``).

Checkpoints are written into the watched directory of tier 0 as a training job would (DCP
shards, ``.metadata`` last); detection, the pipeline and the retention service do the rest.
Each test polls the API or the catalog until the daemon has converged, then looks at the
bytes themselves: files on disk, objects in the bucket.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import (
    MiB,
    config_dict,
    replicas,
    tier_dict,
    wait_for,
    write_files,
)
from tierd.config import load_config
from tierd.daemon.backends.posix.remove import TRASH_SUFFIX
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Replica

RUN = "demo"
PROBLEM = "application/problem+json"
#: A small DCP-like step: two ranks' shards, then the metadata that completes it.
STEP_FILES = {"__0_0.distcp": 96 * 1024, "__1_0.distcp": 64 * 1024 + 7, ".metadata": 2048}

Files = dict[str, bytes]


def posix_tier(root: Path, name: str, **fields: Any) -> dict[str, Any]:
    """A POSIX tier under ``root/name`` (created unless it exists, e.g. as a mount point)."""
    (root / name).mkdir(exist_ok=True)
    return {"name": name, "kind": "posix", "path": str(root / name), **fields}


@dataclass
class Lab:
    """A running daemon over tiers under ``root``, and what a test needs to look at it."""

    root: Path
    daemon: Daemon
    base: str

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One API request."""
        return http.request(method, f"{self.base}{path}", timeout=10, **kw)

    def checkpoints(self) -> dict[int, dict[str, Any]]:
        """The run's checkpoints by step, as the API shows them."""
        answer = self.call("GET", "/v1/checkpoints", params={"run": RUN, "limit": 1000})
        assert answer.status_code == 200, answer.text
        return {item["step"]: item for item in answer.json()["items"]}

    def states(self) -> dict[int, dict[str, str]]:
        """step -> tier -> replica state."""
        return {
            step: {r["tier"]: r["state"] for r in c["replicas"]} for step, c in self.checkpoints().items()
        }

    def replica(self, step: int, tier: str) -> dict[str, Any]:
        """One replica as the API shows it."""
        return next(r for r in self.checkpoints()[step]["replicas"] if r["tier"] == tier)

    def audit(self, checkpoint_id: int | None = None) -> list[dict[str, Any]]:
        """Audit events, oldest first."""
        params = {"limit": 1000} | ({"checkpoint_id": checkpoint_id} if checkpoint_id else {})
        answer = self.call("GET", "/v1/audit", params=params)
        assert answer.status_code == 200, answer.text
        return list(reversed(answer.json()["items"]))

    def write_step(self, step: int, sizes: dict[str, int] = STEP_FILES) -> Files:
        """Write a step into the watched directory; returns its files by path relative to tier 0."""
        data = write_files(self.root / "nvme" / RUN / f"step{step}", sizes, seed=step)
        return {f"{RUN}/step{step}/{name}": content for name, content in data.items()}

    def converge(self, wanted: Callable[[], bool], what: str, timeout: float = 60) -> None:
        """Wait for ``wanted``; fail with the daemon's log tail when it never comes."""
        try:
            wait_for(wanted, timeout, what, interval=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nstates: {self.states()}\n{self.daemon.tail()}") from None

    def logged(self, event: str) -> list[dict[str, Any]]:
        """The daemon's log lines of one event, every run."""
        return [e for e in self.daemon.events() if e.get("event") == event]


LabFactory = Callable[..., Lab]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabFactory]:
    """Start the daemon over the given tiers (tier 0 watched for run ``demo``); stopped at the end."""
    daemons: list[Daemon] = []

    def make(tiers: list[dict[str, Any]], **overrides: Any) -> Lab:
        (tmp_path / "nvme" / RUN).mkdir(parents=True, exist_ok=True)
        data = config_dict(
            tmp_path,
            tiers,
            watch=[{"path": str(tmp_path / "nvme" / RUN), "run": RUN, "format": "dcp"}],
            **({"retention": {"interval": 0.5}} | overrides),
        )
        daemon = Daemon.prepare(tmp_path, data)
        daemons.append(daemon)
        made = Lab(tmp_path, daemon, daemon.url)
        start(made)
        return made

    yield make
    for daemon in daemons:
        daemon.stop()


def start(lab: Lab) -> None:
    """Start (or restart) the daemon and wait until it answers ready."""
    lab.daemon.start()
    lab.daemon.wait_ready(30)


def tree(root: Path) -> Files:
    """Every file under ``root`` with its bytes, by path relative to ``root``."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def trash(root: Path) -> list[str]:
    """Directories being removed (renamed out of sight) under ``root``."""
    return [str(p.relative_to(root)) for p in root.rglob(f"*{TRASH_SUFFIX}")]


def objects(server: S3Server, bucket: str) -> Files:
    """Every object in ``bucket`` with its bytes."""
    client = server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def of_steps(files: dict[int, Files], steps: set[int]) -> Files:
    """The files of ``steps`` merged into one mapping."""
    return {path: data for step in steps for path, data in files[step].items()}


def events_of(audit: list[dict[str, Any]], action: str, tier: str | None = None) -> list[dict[str, Any]]:
    """The audit events of one action (on one tier)."""
    return [e for e in audit if e["action"] == action and (tier is None or e["tier"] == tier)]


def at(text: str) -> datetime:
    """An API timestamp."""
    return datetime.fromisoformat(text)


# -- 1. keep_last on tier 0, milestones and keep_last on S3 ------------------------------------


def test_keep_last_on_tier0_and_milestones_on_s3(
    lab: LabFactory, tmp_path: Path, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3")
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 2}, delete_delay=0),
            tier_dict(s3) | {"retention": {"keep_every_steps": 3, "keep_last": 2}, "delete_delay": 0},
        ]
    )
    files = {step: lab_.write_step(step) for step in range(1, 7)}
    keep = {"nvme": {5, 6}, "s3": {3, 5, 6}}
    wanted = {
        step: {tier: "verified" if step in kept else "deleted" for tier, kept in keep.items()}
        for step in range(1, 7)
    }
    lab_.converge(lambda: lab_.states() == wanted, "retention to converge on both tiers")

    assert tree(tmp_path / "nvme") == of_steps(files, keep["nvme"])
    assert trash(tmp_path / "nvme") == []
    assert objects(moto_server, s3.bucket) == of_steps(files, keep["s3"])
    checkpoints = lab_.checkpoints()
    audit = lab_.audit()
    for step, tiers in wanted.items():
        expected_state = "deleted" if all(s == "deleted" for s in tiers.values()) else "complete"
        assert checkpoints[step]["state"] == expected_state
        for tier, state in tiers.items():
            deleted = [
                e for e in events_of(audit, "deleted", tier) if e["checkpoint_id"] == checkpoints[step]["id"]
            ]
            assert len(deleted) == (state == "deleted"), (step, tier, deleted)
    assert lab_.daemon.terminate(30) == 0


# -- 2. a byte flipped in the durable copy during the delay -----------------------------------


def test_a_flipped_byte_in_the_durable_copy_blocks_the_delete_and_is_repaired(
    lab: LabFactory, tmp_path: Path
) -> None:
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay="4s"),
            posix_tier(tmp_path, "pfs"),
        ]
    )
    files = {1: lab_.write_step(1)}
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    files[2] = lab_.write_step(2)
    lab_.converge(lambda: lab_.replica(1, "nvme")["state"] == "deleting", "step 1's deletion on nvme")
    shard = tmp_path / "pfs" / RUN / "step1" / "__0_0.distcp"
    with shard.open("r+b") as out:  # same size: only a re-hash can tell
        out.seek(1234)
        byte = out.read(1)
        out.seek(1234)
        out.write(bytes([byte[0] ^ 0x5A]))
    assert lab_.replica(1, "nvme")["state"] == "deleting", "the flip must land within the delay"

    lab_.converge(
        lambda: lab_.replica(1, "nvme")["state"] == "deleted", "the tier-0 delete, after the repair"
    )

    assert tree(tmp_path / "pfs") == of_steps(files, {1, 2})
    assert tree(tmp_path / "nvme") == files[2]
    assert lab_.states() == {
        1: {"nvme": "deleted", "pfs": "verified"},
        2: {"nvme": "verified", "pfs": "verified"},
    }
    assert lab_.replica(1, "pfs")["error"] is None
    step1 = lab_.checkpoints()[1]["id"]
    actions = [(e["action"], e["tier"]) for e in lab_.audit(step1)]
    refused = actions.index(("deletion_refused", "nvme"))
    assert actions.index(("reverify_failed", "pfs")) < refused < actions.index(("deleted", "nvme"))
    assert actions.count(("deletion_scheduled", "nvme")) == 2  # again, once pfs was verified again
    assert [e["tier"] for e in lab_.logged("reverify_failed")] == ["pfs"]
    assert lab_.daemon.terminate(30) == 0


# -- 3. undelete within the delay ---------------------------------------------------------------


def test_undelete_within_the_delay_keeps_the_replica_and_pins(lab: LabFactory, tmp_path: Path) -> None:
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay="4s"),
            posix_tier(tmp_path, "pfs"),
        ]
    )
    files = {1: lab_.write_step(1)}
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    files[2] = lab_.write_step(2)
    lab_.converge(lambda: lab_.replica(1, "nvme")["state"] == "deleting", "step 1's deletion on nvme")
    step1 = lab_.checkpoints()[1]
    deadline = at(lab_.replica(1, "nvme")["delete_after"])

    answer = lab_.call("POST", f"/v1/checkpoints/{step1['id']}/undelete", json={"reason": "still needed"})

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["pinned"] is True
    assert {r["tier"]: (r["state"], r["delete_after"]) for r in body["replicas"]} == {
        "nvme": ("verified", None),
        "pfs": ("verified", None),
    }
    # Step 2 goes the same way once step 3 is written; when it is gone, step 1's old
    # deadline is long past and the deleter has run after it.
    files[3] = lab_.write_step(3)
    lab_.converge(lambda: lab_.replica(2, "nvme")["state"] == "deleted", "step 2's deletion on nvme")
    assert at(lab_.replica(2, "nvme")["updated_at"]) > deadline
    assert lab_.states()[1] == {"nvme": "verified", "pfs": "verified"}
    assert lab_.checkpoints()[1]["pinned"] is True
    assert tree(tmp_path / "nvme") == of_steps(files, {1, 3})
    actions = [(e["action"], e["tier"]) for e in lab_.audit(step1["id"])]
    assert actions[-2:] == [("deletion_scheduled", "nvme"), ("undelete", None)]
    assert lab_.daemon.terminate(30) == 0


# -- 4. a hold refuses API deletion and survives disk-pressure eviction -------------------------

BIG_STEP = {"__0_0.distcp": 3 * MiB, "__1_0.distcp": 3 * MiB, ".metadata": 2048}


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs at tmp_path/nvme, unmounted afterwards (after the daemon has stopped)."""
    mount = tmp_path / "nvme"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], check=False)
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_hold_refuses_api_deletion_and_survives_eviction(
    small_fs: Path, lab: LabFactory, tmp_path: Path
) -> None:
    lab_ = lab(
        [
            posix_tier(
                tmp_path, "nvme", free_space={"evict_below": "40%", "evict_to": "60%"}, delete_delay=0
            ),
            # Slow enough that steps sit on tier 0 under pressure before they are durable.
            posix_tier(tmp_path, "pfs", bandwidth_limit=8 * MiB, delete_delay=0),
        ]
    )
    files = {1: lab_.write_step(1, BIG_STEP)}
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    step1 = lab_.checkpoints()[1]["id"]
    held = lab_.call("POST", f"/v1/checkpoints/{step1}/holds", json={"name": "legal", "reason": "litigation"})
    assert held.status_code == 201, held.text

    refused = lab_.call("DELETE", f"/v1/checkpoints/{step1}", params={"reason": "cleanup"})

    assert refused.status_code == 409, refused.text
    assert refused.headers["content-type"].startswith(PROBLEM)
    assert "legal" in refused.json()["detail"]
    files |= {step: lab_.write_step(step, BIG_STEP) for step in range(2, 7)}

    def relieved() -> bool:
        nvme = next(t for t in lab_.call("GET", "/v1/tiers").json() if t["name"] == "nvme")
        states = lab_.states()
        settled = len(states) == 6 and all(
            s["pfs"] == "verified" and s["nvme"] != "deleting" for s in states.values()
        )
        return settled and nvme["free_bytes"] >= 0.6 * nvme["size_bytes"]

    # Six steps of 6 MiB leave 25 % of the 48 MiB free; a pass, once below the low mark (40 %),
    # evicts oldest first up to evict_to (60 %): three of steps 2-5 go. Waiting only for the low
    # mark caught the pass between two evictions (50 % free, the third still to come).
    lab_.converge(relieved, "eviction to bring tier 0 up to evict_to")

    states = lab_.states()
    evicted = {step for step, s in states.items() if s["nvme"] == "deleted"}
    assert evicted, states
    assert evicted.isdisjoint({1, 6}), states
    assert tree(small_fs) == of_steps(files, set(range(1, 7)) - evicted)
    assert tree(tmp_path / "pfs") == of_steps(files, set(range(1, 7)))
    checkpoints = lab_.checkpoints()
    assert [h["name"] for h in checkpoints[1]["holds"]] == ["legal"]
    for step in evicted:
        pfs = next(r for r in checkpoints[step]["replicas"] if r["tier"] == "pfs")
        (event,) = events_of(lab_.audit(checkpoints[step]["id"]), "evicted", "nvme")
        assert at(pfs["verified_at"]) < at(event["at"]), "evicted before it was durable elsewhere"
    audit = lab_.audit()
    assert events_of(audit, "deleted") == []
    assert {e["checkpoint_id"] for e in events_of(audit, "evicted")} == {
        checkpoints[s]["id"] for s in evicted
    }
    # Released, the checkpoint goes from every tier the way an operator asks.
    released = lab_.call("DELETE", f"/v1/checkpoints/{step1}/holds/legal", params={"reason": "settled"})
    assert released.status_code == 200, released.text
    accepted = lab_.call("DELETE", f"/v1/checkpoints/{step1}", params={"reason": "cleanup"})
    assert accepted.status_code == 202, accepted.text
    lab_.converge(lambda: lab_.checkpoints()[1]["state"] == "deleted", "step 1 deleted from every tier")
    assert lab_.states()[1] == {"nvme": "deleted", "pfs": "deleted"}
    assert tree(small_fs) == of_steps(files, set(range(2, 7)) - evicted)
    assert tree(tmp_path / "pfs") == of_steps(files, set(range(2, 7)))
    assert lab_.daemon.terminate(30) == 0


# -- 5. kill -9 during a deletion resumes to the same end state ---------------------------------

#: Many small files: re-checking the pfs copy right before the delete takes a while.
MANY_FILES = {f"__0_{i}.distcp": 256 + i for i in range(600)} | {".metadata": 512}


def end_state(lab_: Lab) -> dict[str, Any]:
    """What a deletion leaves behind, in a form two runs can be compared by."""
    checkpoints = lab_.checkpoints()
    ids = {c["id"]: step for step, c in checkpoints.items()}
    audit = [(ids[e["checkpoint_id"]], e["action"], e["tier"]) for e in lab_.audit() if e["checkpoint_id"]]
    return {
        "checkpoints": {step: c["state"] for step, c in checkpoints.items()},
        "replicas": lab_.states(),
        "nvme": tree(lab_.root / "nvme"),
        "pfs": tree(lab_.root / "pfs"),
        "trash": trash(lab_.root / "nvme"),
        "audit": sorted(audit, key=str),
    }


@pytest.mark.parametrize("kill_at", [None, "claimed", "renamed"])
def test_kill_9_during_a_deletion_resumes_to_the_same_end_state(
    lab: LabFactory, tmp_path: Path, kill_at: str | None
) -> None:
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs"),
        ]
    )
    db = Database(load_config(lab_.daemon.config_path).catalog.url)
    files = {1: lab_.write_step(1, MANY_FILES)}
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs", timeout=90)
    step1 = lab_.checkpoints()[1]["id"]
    step_dir = tmp_path / "nvme" / RUN / "step1"

    def nvme() -> Replica:
        return replicas(db, step1)["nvme"]

    def claimed() -> bool:
        replica = nvme()
        return replica.state == "deleted" or (replica.state == "deleting" and replica.delete_after is None)

    files[2] = lab_.write_step(2)
    if kill_at is not None:
        moment = claimed if kill_at == "claimed" else lambda: not step_dir.exists()
        wait_for(moment, 60, f"step 1's deletion to be {kill_at}", interval=0.002)
        lab_.daemon.kill()
        cut = nvme()
        if kill_at == "claimed":
            assert (cut.state, cut.delete_after, step_dir.exists()) == ("deleting", None, True)
        db.dispose()
        start(lab_)
    lab_.converge(lambda: lab_.states()[1]["nvme"] == "deleted", "step 1's deletion on nvme")
    db.dispose()

    assert end_state(lab_) == {
        "checkpoints": {1: "complete", 2: "complete"},
        "replicas": {1: {"nvme": "deleted", "pfs": "verified"}, 2: {"nvme": "verified", "pfs": "verified"}},
        "nvme": files[2],
        "pfs": of_steps(files, {1, 2}),
        "trash": [],
        "audit": sorted(
            [
                *[(step, "detected", None) for step in (1, 2)],
                *[(step, "replica_verified", "pfs") for step in (1, 2)],
                (1, "deletion_scheduled", "nvme"),
                (1, "deleted", "nvme"),
            ],
            key=str,
        ),
    }
    assert lab_.daemon.terminate(30) == 0


# -- 6. retention.dry_run deletes nothing ---------------------------------------------------------


def test_dry_run_deletes_nothing_and_logs_what_it_would(lab: LabFactory, tmp_path: Path) -> None:
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs", retention={"keep_last": 2}, delete_delay=0),
        ],
        retention={"interval": 0.5, "dry_run": True},
    )
    files = {step: lab_.write_step(step) for step in (1, 2, 3)}
    every = {"nvme": "verified", "pfs": "verified"}
    lab_.converge(lambda: lab_.states() == {1: every, 2: every, 3: every}, "every step on every tier")
    ids = {step: c["id"] for step, c in lab_.checkpoints().items()}

    def would() -> list[tuple[int, str]]:
        return [(e["checkpoint"], e["tier"]) for e in lab_.logged("retention_dry_run_would_delete")]

    def summaries() -> list[dict[str, int]]:
        return [e["would_delete"] for e in lab_.logged("retention_dry_run")]

    # A plan over every step on every tier: each decision is logged once, then counted per tier.
    lab_.converge(lambda: {"nvme": 2, "pfs": 1} in summaries(), "a dry-run plan of all three steps")

    assert sorted(would()) == sorted([(ids[1], "nvme"), (ids[2], "nvme"), (ids[1], "pfs")])
    assert lab_.states() == {1: every, 2: every, 3: every}
    assert tree(tmp_path / "nvme") == of_steps(files, {1, 2, 3})
    assert tree(tmp_path / "pfs") == of_steps(files, {1, 2, 3})
    assert {e["action"] for e in lab_.audit()} == {"detected", "replica_verified"}
    plan = lab_.call("GET", "/v1/retention/plan", params={"action": "delete"}).json()
    assert plan["dry_run"] is True
    assert {(i["checkpoint_id"], t["tier"]) for t in plan["tiers"] for i in t["items"]} == set(would())
    assert lab_.daemon.terminate(30) == 0


# -- 7. deleting a run's only checkpoint leaves the watched directory in place -------------------


def test_deleting_the_only_checkpoint_keeps_watching_its_directory(lab: LabFactory, tmp_path: Path) -> None:
    lab_ = lab([posix_tier(tmp_path, "nvme", delete_delay=0), posix_tier(tmp_path, "pfs", delete_delay=0)])
    lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    step1 = lab_.checkpoints()[1]["id"]
    accepted = lab_.call("DELETE", f"/v1/checkpoints/{step1}", params={"reason": "a failed run"})
    assert accepted.status_code == 202, accepted.text
    lab_.converge(lambda: lab_.checkpoints()[1]["state"] == "deleted", "step 1 deleted from every tier")

    # The run's directory belongs to the job (and is watched): only the step's own went.
    assert sorted(p.name for p in (tmp_path / "nvme").iterdir()) == [RUN]
    assert list((tmp_path / "nvme" / RUN).iterdir()) == []
    assert tree(tmp_path / "pfs") == {}
    files = lab_.write_step(2)
    lab_.converge(lambda: lab_.states().get(2, {}).get("pfs") == "verified", "the next step found and copied")
    assert tree(tmp_path / "pfs") == files
    assert lab_.daemon.terminate(30) == 0
