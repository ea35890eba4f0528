"""Token files are read at start and on reload, never per request, over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from tests.fixtures.world import World, posix_tier
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.config import TokenConfig
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.errors import ConfigError


@dataclass
class Served:
    ctx: Context
    client: httpx.AsyncClient
    token_file: Path

    async def status(self, token: str) -> int:
        answer = await self.client.get("/v1/checkpoints", headers={"Authorization": f"Bearer {token}"})
        return answer.status_code


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    """The API with one token given by a file (``ops.token``, holding ``first``)."""
    token_file = tmp_path / "ops.token"
    token_file.write_text("first\n")
    token_file.chmod(0o600)
    tokens = [{"name": "ops", "token_file": str(token_file), "role": "admin"}]
    world = World.make(
        tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme")], api={"listen": "127.0.0.1:0", "tokens": tokens}
    )
    ctx = world.service.ctx
    api = ApiService(create_app(ctx), "127.0.0.1", 0)
    await api.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
            yield Served(ctx, client, token_file)
    finally:
        await api.stop(5)


async def test_a_token_file_renamed_away_changes_no_answer(served: Served) -> None:
    """Each request read the file: once it was gone every request, known token or not, got a 500."""
    assert await served.status("first") == 200
    served.token_file.rename(served.token_file.with_name("elsewhere"))
    assert await served.status("first") == 200
    unknown = await served.client.get("/v1/checkpoints", headers={"Authorization": "Bearer guess"})
    assert (unknown.status_code, unknown.json()["detail"]) == (401, "unknown bearer token")


async def test_a_reload_reads_the_files_again_and_keeps_a_token_whose_file_is_gone(served: Served) -> None:
    served.token_file.unlink()
    with capture_logs() as logs:
        served.ctx.tokens.reload()
    warning = next(e for e in logs if e["event"] == "token_file_unreadable")
    assert (warning["token"], warning["log_level"]) == ("ops", "warning")
    assert "api.tokens.0.token_file" in warning["error"]
    assert await served.status("first") == 200

    served.token_file.write_text("second\n")
    served.token_file.chmod(0o600)
    served.ctx.tokens.reload()
    assert await served.status("second") == 200
    assert await served.status("first") == 401


async def test_a_reload_with_new_token_configs_replaces_them_all_or_none(
    served: Served, tmp_path: Path
) -> None:
    """``api.tokens`` changed in the config: the whole set swaps, unless a new one cannot be read."""
    missing = [TokenConfig(name="ops", token_file=tmp_path / "gone.token", role="admin")]
    with pytest.raises(ConfigError, match=r"api\.tokens\.0\.token_file: cannot read"):
        served.ctx.tokens.replace(missing)
    assert await served.status("first") == 200

    served.ctx.tokens.replace([TokenConfig(name="ops", token=SecretStr("inline"), role="read")])
    assert (await served.status("inline"), await served.status("first")) == (200, 401)
