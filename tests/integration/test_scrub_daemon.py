"""Scrubbing in the real daemon: rot found on its own, repaired from a later tier, verify on demand.

Tier 0 keeps only the newest step, so step 1's only good copy after its ``pfs`` replica
rots is on ``archive``, the tier AFTER it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.integration.daemon_helpers import config_dict, wait_for, write_files

RUN = "demo"
STEP_FILES = {"__0_0.distcp": 64 * 1024, "__1_0.distcp": 32 * 1024 + 5, ".metadata": 1024}
SCRUB = {"every": "1s", "bandwidth": "50MB"}


class Scrubbed:
    """A daemon over nvme (keep_last 1) -> pfs -> archive, both later tiers scrubbed every second."""

    def __init__(self, root: Path) -> None:
        self.root = root
        tiers: list[dict[str, Any]] = []
        for name, extra in (
            ("nvme", {"retention": {"keep_last": 1}, "delete_delay": 0}),
            ("pfs", {"scrub": SCRUB}),
            ("archive", {"scrub": SCRUB}),
        ):
            (root / name).mkdir()
            tiers.append({"name": name, "kind": "posix", "path": str(root / name), **extra})
        (root / "nvme" / RUN).mkdir()
        watch = [{"path": str(root / "nvme" / RUN), "run": RUN, "format": "dcp"}]
        data = config_dict(root, tiers, watch=watch, retention={"interval": 0.5})
        self.daemon = Daemon.prepare(root, data)
        self.base = self.daemon.url

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return http.request(method, f"{self.base}{path}", timeout=10, **kw)

    def checkpoint(self, step: int) -> dict[str, Any]:
        items = self.call("GET", "/v1/checkpoints", params={"run": RUN, "step": step}).json()["items"]
        assert items, f"step {step} not recorded"
        return dict(items[0])

    def states(self, step: int) -> dict[str, str]:
        try:
            return {r["tier"]: r["state"] for r in self.checkpoint(step)["replicas"]}
        except (AssertionError, httpx.HTTPError):
            return {}

    def converge(self, wanted: Any, what: str, timeout: float = 60) -> None:
        try:
            wait_for(wanted, timeout, what, interval=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.daemon.tail()}") from None


@pytest.fixture
def scrubbed(tmp_path: Path) -> Iterator[Scrubbed]:
    lab = Scrubbed(tmp_path)
    lab.daemon.start()
    try:
        yield lab
    finally:
        lab.daemon.stop()


def test_rot_is_found_by_the_scrub_and_repaired_from_the_later_tier(scrubbed: Scrubbed) -> None:
    lab = scrubbed
    lab.daemon.wait_ready(30)
    step1 = write_files(lab.root / "nvme" / RUN / "step1", STEP_FILES, seed=1)
    lab.converge(
        lambda: lab.states(1) == dict.fromkeys(("nvme", "pfs", "archive"), "verified"), "step 1 copied"
    )
    write_files(lab.root / "nvme" / RUN / "step2", STEP_FILES, seed=2)
    lab.converge(lambda: lab.states(1).get("nvme") == "deleted", "tier 0 to keep only step 2")

    def scrub_of(tier: str) -> dict[str, Any]:
        return next(t["scrub"] for t in lab.call("GET", "/v1/tiers").json() if t["name"] == tier)

    lab.converge(lambda: scrub_of("pfs")["last_pass_at"], "a whole scrub pass of pfs")
    shard = lab.root / "pfs" / RUN / "step1" / "__1_0.distcp"
    rotten = bytearray(shard.read_bytes())
    rotten[1000] ^= 0x01
    shard.write_bytes(bytes(rotten))

    cid = lab.checkpoint(1)["id"]

    def mismatches() -> list[dict[str, Any]]:
        events = lab.call("GET", "/v1/audit", params={"checkpoint_id": cid, "limit": 1000}).json()["items"]
        return [e for e in events if e["action"] == "replica_mismatch"]

    lab.converge(mismatches, "the scrub to find the flipped bit")
    [found] = mismatches()
    assert (found["actor"], found["tier"], found["detail"]["file"]) == (
        "scrub",
        "pfs",
        f"{RUN}/step1/__1_0.distcp",
    )
    lab.converge(
        lambda: lab.states(1) == {"nvme": "deleted", "pfs": "verified", "archive": "verified"}, "repair"
    )
    lab.converge(lambda: shard.read_bytes() == step1["__1_0.distcp"], "the good bytes back on pfs")
    assert not (lab.root / "nvme" / RUN / "step1").exists()

    verified = lab.call("POST", f"/v1/checkpoints/{cid}/verify")
    assert verified.status_code == 200
    assert [(t["tier"], t["result"]) for t in verified.json()["tiers"]] == [
        ("nvme", "skipped"),
        ("pfs", "ok"),
        ("archive", "ok"),
    ]
    metrics = lab.call("GET", "/metrics").text
    assert 'tierd_scrub_mismatches_total{tier="pfs"} 1.0' in metrics
    assert 'tierd_scrub_replicas_total{result="mismatch",tier="pfs"} 1.0' in metrics
    assert lab.daemon.terminate(30) == 0
