"""Fixtures of the conformance suite: ``harness`` and ``backend``, one per backend kind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.harness import BACKENDS, Harness
from tierd.daemon.backends import Backend


@pytest.fixture(params=BACKENDS)
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """One Harness per backend kind; closes every backend it made."""
    kind: str = request.param
    server = None
    if kind.startswith("s3-"):
        server = request.getfixturevalue(f"{kind.removeprefix('s3-')}_server")
    gcs = request.getfixturevalue("gcs_emulator") if kind == "gcs" else None
    # --- azure (issue 28) ---
    if kind == "azure":
        server = request.getfixturevalue("azurite_server")
    # --- end azure ---
    harness = Harness(kind, tmp_path, server, gcs)
    yield harness
    for backend in harness.created:
        await backend.close()


@pytest.fixture
async def backend(harness: Harness) -> Backend:
    """A fresh backend of each kind."""
    return await harness.make()
