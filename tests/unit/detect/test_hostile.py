"""Hostile entries in tier 0, through the real detector and recorder: refused, audited, never opened.

Each test plants one kind of entry in a committed DCP step (or beside it), runs the
watcher's reconcile, and checks: nothing is recorded, one ``refused`` audit event names
the entry and its kind, the file behind it was never opened (inotify on its inode, by
any name), its bytes are in no log, and once the entry is gone the step is recorded.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from structlog.testing import capture_logs

from tests.fixtures.opens import OpenSpy
from tests.unit.detect.helpers import NothingKnown, make_spec
from tests.unit.detect.layouts import LAYOUTS
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Checkpoint, File
from tierd.daemon.context import Context
from tierd.daemon.detect.hashing import hash_stable
from tierd.daemon.detect.hostile import find_offences, name_problem, printable
from tierd.daemon.detect.scan import Found, scan_root
from tierd.daemon.detect.service import DetectService
from tierd.errors import Refused, Unstable

pytestmark = pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="inotify and O_PATH are Linux's")

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
DS = next(layout for layout in LAYOUTS if layout.name == "deepspeed")
SECRET = b"root:$6$not-for-tierd$:19000:0:99999:7:::\n"


@pytest.fixture
def ctx(sqlite_db: Database, make_config: Callable[..., Config]) -> Context:
    return Context(config=make_config(), db=sqlite_db)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every tier, holding a secret only root should read."""
    directory = tmp_path / "etc"
    directory.mkdir()
    (directory / "shadow").write_bytes(SECRET)
    (directory / "shadow").chmod(0o600)
    return directory


@pytest.fixture
def spy(outside: Path) -> Iterator[OpenSpy]:
    watcher = OpenSpy(outside / "shadow", outside)
    yield watcher
    watcher.close()


def _step(ctx: Context, step: int = 3) -> Path:
    root = ctx.config.watch[0].path
    DCP.uncommitted(root, step)
    DCP.commit(root, step)
    return root / f"step_{step}"


def _plant_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def _plant_bad_utf8(ckpt: Path) -> Path:
    raw = os.fsencode(ckpt) + b"/shard\xff.bin"
    with open(raw, "wb") as f:
        f.write(b"x" * 16)
    return Path(os.fsdecode(raw))


# kind -> (plant it in the checkpoint, returning the entry; the kind the refusal names)
PLANTS: dict[str, tuple[Callable[[Path, Path], Path], str]] = {
    "symlink to a file": (lambda c, o: _link(c / "extra.distcp", o / "shadow"), "symlink"),
    "symlink to a directory": (lambda c, o: _link(c / "sub", o), "symlink"),
    "nested symlink": (lambda c, o: _link(_mkdir(c / "a" / "b") / "x.distcp", o / "shadow"), "symlink"),
    "dangling symlink": (lambda c, o: _link(c / "gone", o / "missing"), "symlink"),
    "FIFO": (lambda c, o: _fifo(c / "pipe"), "FIFO"),
    "socket": (lambda c, o: _do(_plant_socket, c / "sock"), "socket"),
    "hard link": (lambda c, o: _hard_link(c / "shard.distcp", o / "shadow"), "hard link (2 links)"),
    "newline in a name": (lambda c, o: _write(c / "bad\nname.distcp"), "name holds a control character"),
    "invalid UTF-8 name": (lambda c, o: _plant_bad_utf8(c), "name is not valid UTF-8"),
}


def _do(fn: Callable[[Path], Any], path: Path) -> Path:
    fn(path)
    return path


def _link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


def _hard_link(path: Path, target: Path) -> Path:
    os.link(target, path)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _write(path: Path) -> Path:
    path.write_bytes(b"y" * 32)
    return path


def _events(db: Database, action: str) -> list[AuditEvent]:
    with db.read_session() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action == action)))


def _checkpoints(db: Database) -> list[Checkpoint]:
    with db.read_session() as session:
        return list(session.scalars(select(Checkpoint)))


@pytest.mark.parametrize("kind", list(PLANTS))
async def test_hostile_entry_refuses_the_checkpoint(
    kind: str, ctx: Context, outside: Path, spy: OpenSpy
) -> None:
    ckpt = _step(ctx)
    plant, named = PLANTS[kind]
    entry = plant(ckpt, outside)
    entry_spy = OpenSpy(entry) if stat.S_ISFIFO(os.lstat(entry).st_mode) else None
    service = DetectService(ctx)
    with capture_logs() as logs:
        await asyncio.wait_for(service.reconcile(), 30)
        await asyncio.wait_for(service.reconcile(), 30)  # looked at again: audited once
    assert _checkpoints(ctx.db) == []
    (event,) = _events(ctx.db, "refused")
    assert event.checkpoint_id is None
    assert event.detail["path"] == "demo/step_3"
    assert event.detail["count"] == 1
    shown = printable(entry.relative_to(ctx.config.tier0.path).as_posix())
    assert event.detail["offending"] == [{"path": shown, "kind": named}]
    assert shown in event.reason
    assert named in event.reason
    assert spy.opened() == set()
    if entry_spy is not None:
        assert entry_spy.opened() == set()
        entry_spy.close()
    refusals = [e for e in logs if e["event"] == "checkpoint_refused"]
    assert [e["reason"] for e in refusals] == [event.reason]
    assert SECRET.decode() not in repr(logs)
    if entry.is_dir() and not entry.is_symlink():
        entry.rmdir()
    else:
        entry.unlink()
    await asyncio.wait_for(service.reconcile(), 30)
    (row,) = _checkpoints(ctx.db)
    assert (row.step, row.state) == (3, "complete")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
async def test_device_node_is_refused_and_never_opened(ctx: Context) -> None:
    ckpt = _step(ctx)
    node = ckpt / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    watcher = OpenSpy(node)
    try:
        await asyncio.wait_for(DetectService(ctx).reconcile(), 30)
        assert watcher.opened() == set()
    finally:
        watcher.close()
    assert _checkpoints(ctx.db) == []
    (event,) = _events(ctx.db, "refused")
    assert event.detail["offending"] == [{"path": "demo/step_3/null", "kind": "device"}]


async def test_names_with_dots_are_recorded(ctx: Context) -> None:
    ckpt = _step(ctx)
    (ckpt / "a..b.distcp").write_bytes(b"z" * 8)
    (ckpt / "..hidden").write_bytes(b"z" * 8)
    (ckpt / "ünïcödé 名前.bin").write_bytes(b"z" * 8)
    await DetectService(ctx).reconcile()
    (row,) = _checkpoints(ctx.db)
    with ctx.db.read_session() as session:
        names = set(session.scalars(select(File.relpath).where(File.checkpoint_id == row.id)))
    assert {"demo/step_3/a..b.distcp", "demo/step_3/..hidden", "demo/step_3/ünïcödé 名前.bin"} <= names
    assert _events(ctx.db, "refused") == []


async def test_symlink_beside_checkpoints_is_ignored(ctx: Context, outside: Path, spy: OpenSpy) -> None:
    """Lightning's and NeMo's ``last`` links sit beside the checkpoints: not one, never followed."""
    _step(ctx)
    root = ctx.config.watch[0].path
    (root / "last.ckpt").symlink_to("step_3")
    (root / "step_9.pt").symlink_to(outside / "shadow")
    await DetectService(ctx).reconcile()
    assert [(c.step, c.path) for c in _checkpoints(ctx.db)] == [(3, "demo/step_3")]
    assert _events(ctx.db, "refused") == []
    assert spy.opened() == set()


async def test_marker_symlink_is_never_read(ctx: Context, outside: Path, spy: OpenSpy) -> None:
    """A DeepSpeed ``latest`` that is a symlink (to a file naming the tag) is not followed."""
    root = ctx.config.watch[0].path
    DS.uncommitted(root, 4)
    (outside / "tag").write_text("global_step4")
    (root / "latest").symlink_to(outside / "tag")
    tag_spy = OpenSpy(outside / "tag")
    try:
        await DetectService(ctx).reconcile()
        assert tag_spy.opened() == set()
    finally:
        tag_spy.close()
    assert _checkpoints(ctx.db) == []


async def test_refusal_with_awkward_names_is_audited_on_every_catalog(
    db: Database, make_config: Callable[..., Config]
) -> None:
    """Control characters and undecodable bytes reach the audit log escaped, on SQLite and PostgreSQL."""
    ctx = Context(config=make_config(), db=db)
    ckpt = _step(ctx)
    _write(ckpt / "tab\there\x7f.distcp")
    _plant_bad_utf8(ckpt)
    await DetectService(ctx).reconcile()
    (event,) = _events(db, "refused")
    assert event.detail["count"] == 2
    assert {o["path"] for o in event.detail["offending"]} == {
        "demo/step_3/shard\\xff.bin",
        "demo/step_3/tab\\there\\x7f.distcp",
    }
    assert _checkpoints(db) == []


def test_find_offences_on_a_file_checkpoint(tmp_path: Path) -> None:
    """A single-file checkpoint (torch.save) that is a hard link, or a checkpoint path with a bad name."""
    (tmp_path / "run").mkdir()
    (tmp_path / "model.pt").write_bytes(b"m")
    os.link(tmp_path / "model.pt", tmp_path / "run" / "step_1.pt")
    (offence,) = find_offences(tmp_path, "run/step_1.pt", ())
    assert (offence.path, offence.kind) == ("run/step_1.pt", "hard link (2 links)")
    assert find_offences(tmp_path, "run/missing\n.pt", ())[0].kind.startswith("checkpoint path: ")
    assert name_problem("ok name.pt") is None
    assert name_problem("..") is not None


def _release(fifo: Path) -> bool:
    """Unblock whoever waits to read ``fifo``; True if someone did (a regression, not a hang)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False  # ENXIO: no reader has it open
    os.close(fd)
    return True


async def test_fifo_markers_never_hang_detection(ctx: Context) -> None:
    """FIFOs where detectors read metadata (DeepSpeed's ``latest``, DCP's ``.metadata``), no writer."""
    root = ctx.config.watch[0].path
    DS.uncommitted(root, 4)
    DCP.uncommitted(root, 5)
    fifos = [root / "latest", root / "step_5" / ".metadata"]
    for fifo in fifos:
        os.mkfifo(fifo)
    try:
        await asyncio.wait_for(DetectService(ctx).reconcile(), 30)
    finally:
        blocked = [fifo for fifo in fifos if _release(fifo)]
    assert blocked == []
    assert _checkpoints(ctx.db) == []


def _hashable(ctx: Context) -> tuple[Found, Path]:
    _step(ctx)
    spec = make_spec(ctx.config.watch[0].path, ctx.config.tier0.path)
    (found,) = [f for f in scan_root(spec, NothingKnown()) if f.verdict.complete]
    return found, max(found.verdict.files, key=lambda f: f.size).path


async def test_file_swapped_for_a_fifo_before_hashing_does_not_hang(ctx: Context) -> None:
    found, victim = _hashable(ctx)
    victim.unlink()
    os.mkfifo(victim)
    try:
        with pytest.raises(Unstable, match="vanished"):
            await asyncio.wait_for(hash_stable(found.verdict.files, ctx.config.tier0.path.resolve()), 30)
    finally:
        assert not _release(victim)


async def test_file_swapped_for_a_symlink_before_hashing_is_not_followed(
    ctx: Context, outside: Path, spy: OpenSpy
) -> None:
    found, victim = _hashable(ctx)
    victim.unlink()
    victim.symlink_to(outside / "shadow")
    with pytest.raises(OSError, match="a symlink, never followed"):
        await hash_stable(found.verdict.files, ctx.config.tier0.path.resolve())
    assert spy.opened() == set()


async def test_directory_swapped_for_a_symlink_before_hashing_is_not_followed(
    ctx: Context, outside: Path, spy: OpenSpy
) -> None:
    found, _ = _hashable(ctx)
    ckpt = found.candidate.path
    for f in found.verdict.files:  # the same names outside, so only the directory differs
        (outside / f.path.name).write_bytes(SECRET)
    watched = OpenSpy(*(outside / f.path.name for f in found.verdict.files))
    ckpt.rename(ckpt.with_name("moved"))
    ckpt.symlink_to(outside)
    try:
        with pytest.raises(OSError, match="Not a directory"):
            await hash_stable(found.verdict.files, ctx.config.tier0.path.resolve())
        assert watched.opened() == set()
    finally:
        watched.close()


async def test_file_swapped_for_a_hard_link_before_hashing_is_refused(
    ctx: Context, outside: Path, spy: OpenSpy
) -> None:
    found, victim = _hashable(ctx)
    victim.unlink()
    os.link(outside / "shadow", victim)
    with pytest.raises(Refused, match="hard link"):
        await hash_stable(found.verdict.files, ctx.config.tier0.path.resolve())
    assert spy.read() == set()


@pytest.mark.parametrize("suffix", [b"\n", b"\xff"], ids=["newline", "invalid-utf8"])
async def test_checkpoint_named_badly_is_refused(
    suffix: bytes, db: Database, make_config: Callable[..., Config]
) -> None:
    """The checkpoint's own name (not only a file in it) is checked, on SQLite and PostgreSQL."""
    ctx = Context(config=make_config(), db=db)
    root = ctx.config.watch[0].path
    DCP.uncommitted(root, 8)
    DCP.commit(root, 8)
    bad = Path(os.fsdecode(os.fsencode(root / "step_8") + suffix))
    (root / "step_8").rename(bad)
    with capture_logs() as logs:
        await DetectService(ctx).reconcile()
    assert _checkpoints(db) == []
    (event,) = _events(db, "refused")
    shown = printable(bad.relative_to(ctx.config.tier0.path).as_posix())
    assert event.detail["path"] == shown
    assert [o["path"] for o in event.detail["offending"]] == [shown]
    assert event.detail["offending"][0]["kind"].startswith("checkpoint path: name ")
    assert [e["path"] for e in logs if e["event"] == "checkpoint_refused"] == [shown]


@pytest.mark.parametrize("swap", ["symlink", "hard link", "FIFO"])
async def test_recorded_file_swapped_later_is_flagged_unread(
    swap: str, ctx: Context, outside: Path, spy: OpenSpy
) -> None:
    """The reconcile's change check marks the checkpoint ``changed`` and reads nothing outside."""
    ckpt = _step(ctx)
    service = DetectService(ctx)
    await service.reconcile()
    victim = max((p for p in ckpt.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
    size = victim.stat().st_size
    victim.unlink()
    (outside / "shadow").write_bytes(SECRET * (size // len(SECRET) + 1))
    os.truncate(outside / "shadow", size)  # the recorded size: only the bytes differ
    if swap == "symlink":
        victim.symlink_to(outside / "shadow")
    elif swap == "hard link":
        os.link(outside / "shadow", victim)
    else:
        os.mkfifo(victim)
    spy.opened()  # forget the writes above
    watched = OpenSpy(outside / "shadow")
    try:
        await asyncio.wait_for(service.check_changes(), 30)
        assert watched.read() == set()
    finally:
        watched.close()
    (row,) = _checkpoints(ctx.db)
    assert row.state == "changed"
    (event,) = _events(ctx.db, "changed")
    assert event.detail["missing"] == [victim.relative_to(ctx.config.tier0.path).as_posix()]
