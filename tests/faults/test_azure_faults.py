"""Hops into and out of Azure (Azurite) through the fault proxy, one fault kind at a time (issue 28).

503 and 429 throttling, a connection reset mid-body, a truncated answer, and a body that
reaches the service with a byte flipped (its ``x-ms-content-crc64`` no longer matches: the
service refuses it) all end with the replica verified and the container holding the
source's bytes; a refusal (403) ends ``failed`` naming the service's answer. Azure requests
are told apart by method and query: a block is a PUT with ``blockid``, the commit a PUT
with ``comp`` and no ``blockid``, a Put Blob a PUT with neither.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.faults.hops import OPTIONS, migrated_catalog
from tests.fixtures.azurite import AzuriteServer
from tests.fixtures.faultproxy import INTERNAL_ERROR, Fault, FaultProxy, Rule
from tests.fixtures.pipeline_run import run_pipeline_until
from tests.fixtures.world import World, posix_tier
from tests.integration.daemon_helpers import MiB, record_checkpoint, replicas, write_files
from tierd.config import AzureTier
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Replica
from tierd.daemon.context import Context
from tierd.daemon.pipeline.service import PipelineService

RUN, STEP, PATH = "demo", 1, "demo/step1"
SIZES = {"big.bin": 2 * MiB + 5, "small.bin": 100 * 1024, ".metadata": 3000}  # blocks of 1 MiB
SMALL = "*/small.bin"
BLOCK = frozenset({"blockid"})
COMP = frozenset({"comp"})

RETRYABLE = {
    "503 ServerBusy on two blocks": Rule(Fault.error(503, "ServerBusy"), method="PUT", having=BLOCK, first=2),
    "429 on a Put Blob": Rule(
        Fault.error(429, "TooManyRequests"), method="PUT", key=SMALL, lacking=COMP, nth=1
    ),
    "500 on the commit": Rule(INTERNAL_ERROR, method="PUT", having=COMP, lacking=BLOCK, nth=1),
    "reset mid-body of a block": Rule(Fault("reset_request"), method="PUT", having=BLOCK, nth=1),
    "truncated answer to a Put Blob": Rule(Fault("truncate"), method="PUT", key=SMALL, lacking=COMP, nth=1),
    "a block's body corrupted on the way": Rule(Fault("corrupt_request"), method="PUT", having=BLOCK, nth=1),
    "a Put Blob's body corrupted on the way": Rule(
        Fault("corrupt_request"), method="PUT", key=SMALL, lacking=COMP, nth=1
    ),
}


@dataclass
class AzureHops:
    """A checkpoint on tier 0, an Azure tier behind the proxy, and a POSIX tier after it."""

    root: Path
    db: Database
    world: World
    checkpoint_id: int
    data: dict[str, bytes]
    proxy: FaultProxy
    server: AzuriteServer
    tier: AzureTier

    async def hop(self, tier: str) -> Replica:
        """Run the pipeline until ``tier``'s replica is verified or failed; that replica.

        The pipeline knows the tiers up to ``tier`` only: the next hop never runs early (the
        ``pfs`` hop, copied from the blob before a test set its faults, left none to fire).
        """
        config = self.world.config
        upto = [t.name for t in config.tiers].index(tier) + 1
        ctx = Context(config=config.model_copy(update={"tiers": config.tiers[:upto]}), db=self.db)

        def ended() -> bool:
            row = replicas(self.db, self.checkpoint_id).get(tier)
            return row is not None and row.state in ("verified", "failed")

        await run_pipeline_until(PipelineService(ctx, OPTIONS), ended, timeout=90, in_thread=True)
        return replicas(self.db, self.checkpoint_id)[tier]

    def stored(self) -> dict[str, bytes]:
        """What the container holds, read straight from Azurite (not through the proxy)."""
        with self.server.container(self.tier.container) as client:
            return {
                b.name.removeprefix(PATH + "/"): client.download_blob(b.name).readall()
                for b in client.list_blobs()
            }


@contextmanager
def azure_world(root: Path, server: AzuriteServer) -> Iterator[AzureHops]:
    """tier 0 (POSIX, holding the checkpoint), Azure through a fresh proxy, then a POSIX ``pfs``."""
    (root / "nvme").mkdir()
    shutil.copyfile(migrated_catalog(), root / "catalog.db")
    db = Database(f"sqlite:///{root / 'catalog.db'}")
    with FaultProxy(server.url.rsplit("/", 1)[0]) as proxy:
        tier = server.new_tier("blob", endpoint_url=f"{proxy.endpoint_url}/devstoreaccount1", block_size=MiB)
        world = World.make(root, db, [posix_tier(root, "nvme"), tier, posix_tier(root, "pfs")], node="n1")
        data = write_files(root / "nvme" / PATH, SIZES)
        cid = record_checkpoint(db, world.config, RUN, STEP, PATH)
        try:
            yield AzureHops(root, db, world, cid, data, proxy, server, tier)
        finally:
            db.dispose()


@pytest.mark.parametrize("case", list(RETRYABLE))
async def test_retryable_faults_end_verified(
    tmp_path: Path, azurite_server: AzuriteServer, case: str
) -> None:
    with azure_world(tmp_path, azurite_server) as world:
        world.proxy.set_rules([RETRYABLE[case]])
        replica = await world.hop("blob")
        assert (replica.state, replica.error) == ("verified", None), world.proxy.fired
        assert world.proxy.fired
        assert world.stored() == world.data


async def test_a_refusal_fails_the_hop_naming_the_answer(
    tmp_path: Path, azurite_server: AzuriteServer
) -> None:
    with azure_world(tmp_path, azurite_server) as world:
        world.proxy.set_rules([Rule(Fault.error(403, "AuthorizationFailure"), method="PUT", key=SMALL)])
        replica = await world.hop("blob")
        assert replica.state == "failed"
        assert "403" in (replica.error or "")
        assert "small.bin" not in world.stored()


@pytest.mark.parametrize(
    "rule",
    [
        Rule(Fault("truncate"), method="GET", lacking=COMP, nth=2),
        Rule(Fault.error(503, "ServerBusy"), method="GET", lacking=COMP, first=2),
    ],
    ids=["truncated GET", "503 on two GETs"],
)
async def test_reading_from_azure_survives_cut_and_throttled_answers(
    tmp_path: Path, azurite_server: AzuriteServer, rule: Rule
) -> None:
    with azure_world(tmp_path, azurite_server) as world:
        assert (await world.hop("blob")).state == "verified"
        world.proxy.set_rules([rule])
        replica = await world.hop("pfs")
        assert (replica.state, replica.error) == ("verified", None), world.proxy.fired
        assert world.proxy.fired
        root = tmp_path / "pfs" / PATH
        assert {
            str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()
        } == world.data
