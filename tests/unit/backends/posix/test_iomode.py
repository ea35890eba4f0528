"""A POSIX tier's ``io_mode``: O_DIRECT or the page cache for big files, configured or measured."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from structlog.testing import capture_logs

from tierd.config import PosixTier, load_config
from tierd.daemon import checksum
from tierd.daemon.backends import BytesReader
from tierd.daemon.backends.base import WriteRequest
from tierd.daemon.backends.budget import MIB, ByteBudget, map_aligned
from tierd.daemon.backends.posix import PosixBackend, iomode
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix.temp import TempFile
from tierd.daemon.beneath import Root
from tierd.errors import ConfigError

CHUNK = 1 * MIB


@pytest.fixture(autouse=True)
def _fresh_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no file system measured (the choices are kept process-wide)."""
    monkeypatch.setattr(iomode, "_chosen", {})


def test_o_direct_unless_the_page_cache_is_clearly_faster() -> None:
    assert iomode.choose([0.10, 0.12], [0.09, 0.11])[0] == "direct"  # within the margin: less CPU wins
    mode, reason = iomode.choose([0.20, 0.30], [0.10, 0.25], nbytes=16 * MIB)
    assert mode == "buffered"
    assert "O_DIRECT 83.9 MB/s, page cache 167.8 MB/s" in reason  # the best of each way counts
    assert iomode.choose([], [0.1]) == ("buffered", "the file system refuses O_DIRECT")
    assert iomode.choose([0.1], [])[0] == "direct"
    with pytest.raises(ValueError, match="no probe timing"):
        iomode.choose([], [])


def test_the_probe_writes_both_ways_in_turn_and_leaves_nothing(tmp_path: Path) -> None:
    view = memoryview(map_aligned(CHUNK))
    direct, buffered = iomode.probe(view, Root(tmp_path).place(iomode.PROBE_NAME), nbytes=2 * MIB, rounds=2)
    assert len(buffered) == 2
    assert len(direct) in (0, 2)  # none where the file system refuses O_DIRECT (tmpfs)
    assert all(seconds > 0 for seconds in [*direct, *buffered])
    assert os.listdir(tmp_path) == []
    unaligned = memoryview(bytearray(CHUNK + 1))[1:]  # O_DIRECT refuses it: the page cache is still timed
    direct, buffered = iomode.probe(unaligned, Root(tmp_path).place(iomode.PROBE_NAME), nbytes=MIB, rounds=1)
    assert (direct, len(buffered)) == ([], 1)


async def _chooser_direct(chooser: iomode.IoChooser, root: Path) -> bool:
    return await chooser.direct(Root(root), ByteBudget(4 * CHUNK), CHUNK)


async def test_auto_measures_a_file_system_once_and_logs_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes: list[Path] = []

    def timed(view: memoryview, final: object, *args: object) -> tuple[list[float], list[float]]:
        probes.append(final.path)  # type: ignore[attr-defined]
        return [0.4, 0.5], [0.1, 0.2]  # the page cache 4x faster

    monkeypatch.setattr(iomode, "probe", timed)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with capture_logs() as logs:
        assert await _chooser_direct(iomode.IoChooser("pfs"), tmp_path / "a") is False
        other = iomode.IoChooser("pfs2")  # another tier on the same file system
        assert await _chooser_direct(other, tmp_path / "b") is False
    assert probes == [tmp_path / "a" / iomode.PROBE_NAME]  # measured once, in the tier's root
    chosen = [e for e in logs if e["event"] == "io_mode_chosen"]
    assert chosen == [
        {
            "event": "io_mode_chosen",
            "log_level": "info",
            "tier": "pfs",
            "mode": "buffered",
            "configured": "auto",
            "reason": chosen[0]["reason"],
        }
    ]
    assert "page cache faster by more than 1.25x" in chosen[0]["reason"]
    assert other.choice is not None
    assert other.choice.mode == "buffered"


async def test_a_choice_is_measured_again_once_it_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timings = iter([([0.1], [0.1]), ([0.5], [0.1])])
    monkeypatch.setattr(iomode, "probe", lambda *args: next(timings))
    chooser = iomode.IoChooser("pfs")
    assert await _chooser_direct(chooser, tmp_path) is True
    assert await _chooser_direct(chooser, tmp_path) is True  # still fresh: not measured again
    device = os.stat(tmp_path).st_dev
    old = iomode._chosen[device]
    iomode._chosen[device] = iomode.Choice(
        old.mode, old.reason, time.monotonic() - iomode.REPROBE_SECONDS - 1
    )
    assert await _chooser_direct(chooser, tmp_path) is False  # the disk changed since


async def test_a_configured_mode_is_not_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("probed a tier whose io_mode is configured")

    monkeypatch.setattr(iomode, "probe", refuse)
    with capture_logs() as logs:
        assert await _chooser_direct(iomode.IoChooser("a", "buffered"), tmp_path) is False
        assert await _chooser_direct(iomode.IoChooser("b", "direct"), tmp_path) is True
    assert [(e["tier"], e["mode"], e["reason"]) for e in logs if e["event"] == "io_mode_chosen"] == [
        ("a", "buffered", "configured"),
        ("b", "direct", "configured"),
    ]
    with pytest.raises(ValueError, match="io_mode"):
        iomode.IoChooser("c", "fast")


async def test_a_failed_probe_keeps_o_direct(tmp_path: Path) -> None:
    with capture_logs() as logs:
        assert await _chooser_direct(iomode.IoChooser("gone"), tmp_path / "unmounted") is True
    assert [e["event"] for e in logs] == ["io_probe_failed"]


def _backend(tmp_path: Path, io_mode: str) -> PosixBackend:
    root = tmp_path / io_mode
    root.mkdir()
    tier = PosixTier.model_validate({"name": io_mode, "kind": "posix", "path": root, "io_mode": io_mode})
    return PosixBackend(tier, budget=ByteBudget(8 * CHUNK), chunk_size=CHUNK)


@pytest.mark.parametrize("io_mode", ["direct", "buffered"])
async def test_big_files_go_the_way_the_tier_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, io_mode: str
) -> None:
    opened: list[int] = []
    open_direct = posixcopy.open_direct

    def spy(temp: TempFile) -> int:
        fd = open_direct(temp)
        opened.append(fd)
        return fd

    monkeypatch.setattr(posixcopy, "open_direct", spy)
    backend = _backend(tmp_path, io_mode)
    data = os.urandom(3 * CHUNK + 5)
    crc = checksum.Crc64()
    crc.update(data)
    info = await backend.write(WriteRequest("job/model.bin", BytesReader(data), crc.hexdigest()))
    assert info.verified_by == "stream"
    assert (tmp_path / io_mode / "job" / "model.bin").read_bytes() == data
    assert len(opened) == (1 if io_mode == "direct" else 0)


@pytest.mark.parametrize(
    ("value", "reason"), [("fast", "'auto', 'direct' or 'buffered'"), (1, "'auto', 'direct' or 'buffered'")]
)
def test_a_bad_io_mode_names_the_key(tmp_path: Path, value: object, reason: str) -> None:
    tiers: list[dict[str, object]] = [
        {"name": "nvme", "kind": "posix", "path": "ckpt"},
        {"name": "pfs", "kind": "posix", "path": "pfs", "io_mode": value},
    ]
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": tiers}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "tiers.1.posix.io_mode" in str(info.value)
    assert reason in str(info.value)
    path.write_text(yaml.safe_dump({"tiers": [tiers[0], {**tiers[1], "io_mode": "buffered"}]}))
    assert load_config(path).tiers[1].io_mode == "buffered"  # type: ignore[union-attr]
