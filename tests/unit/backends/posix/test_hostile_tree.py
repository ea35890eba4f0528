"""Property: whatever a job swaps into a tree, and when, tierd touches nothing outside its roots.

The attacker (hypothesis) picks the moments: the Nth file-system call tierd makes (``os.open``,
``os.mkdir``, ``os.rename``, ``os.unlink``, ``os.rmdir``, ``os.stat``, ``os.scandir``,
``os.listdir``). Right before that call it swaps a directory of the tree for a symlink to a
victim directory, a file for a symlink to a victim file, or a directory for a plain file. Then
the operation runs on: a copy between two POSIX tiers (each file alone, and small files
staged in a batch), a restore into a target below an allowed root and its clean-up, the
removal of a checkpoint from both tiers, and a scrub (verify, list, stale-temporary sweep).

Whatever the operation answers (an error is fine), two things must hold:
- the victim tree is exactly as it was (names, kinds, bytes, modes);
- every descriptor tierd opened resolved, once open, inside one of the roots (so nothing
  outside was read either).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conformance.harness import crc
from tierd.config import PosixTier
from tierd.daemon.backends import PosixBackend, WriteRequest
from tierd.daemon.backends.base import SmallFile
from tierd.daemon.beneath import Root
from tierd.daemon.restore.cleanup import remove_restored
from tierd.errors import TierdError

KIB = 1024
#: A checkpoint with nested directories; ``big`` spans several chunks of the tiers' 64 KiB.
FILES = {
    "run/step/.metadata": b"m" * 300,
    "run/step/a.bin": os.urandom(5 * KIB),
    "run/step/sub/b.bin": os.urandom(3 * KIB),
    "run/step/sub/deep/c.bin": os.urandom(KIB),
    "run/step/sub/big.bin": os.urandom(200 * KIB + 17),
}
NAMES = [name.removeprefix("run/step/") for name in FILES]
#: What an attacker may swap, in each tree (relative to its top): directories, then files.
TIER_DIRS = ["run", "run/step", "run/step/sub", "run/step/sub/deep"]
TARGET_DIRS = ["sub", "sub/deep"]
SWAPS = [
    *[(tree, d, kind) for tree in ("tier0", "pfs") for d in TIER_DIRS for kind in ("link_dir", "file")],
    *[("target", d, kind) for d in TARGET_DIRS for kind in ("link_dir", "file")],
    *[(tree, f, "link_file") for tree in ("tier0", "pfs") for f in FILES],
    *[("target", f, "link_file") for f in NAMES],
]
WATCHED = ("open", "mkdir", "rename", "unlink", "rmdir", "stat", "scandir", "listdir")
OPERATIONS = ("copy", "copy_batched", "restore", "remove", "scrub")


@dataclass
class Lab:
    """The roots, the victim, and the attacker's schedule."""

    base: Path
    swaps: dict[int, tuple[str, str, str]]  # call number -> (tree, relpath, kind)
    calls: int = 0
    opened_outside: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    quiet: threading.local = field(default_factory=threading.local)

    @property
    def victim(self) -> Path:
        return self.base / "victim"

    def tree(self, name: str) -> Path:
        return {
            "tier0": self.base / "tier0",
            "pfs": self.base / "pfs",
            "target": self.base / "restores/target",
        }[name]

    def roots(self) -> list[Path]:
        """Where tierd may open files: the roots, and where the attacker moved its own directories.

        A directory the job renamed out of a tree while tierd was in it is followed where it
        went (as with Go's ``os.Root``): only a place the job can write itself.
        """
        return [self.base / name for name in ("tier0", "pfs", "restores", "aside")]


def build(base: Path) -> None:
    for name in ("tier0", "pfs", "restores"):
        (base / name).mkdir()
    for relpath, data in FILES.items():
        for root in ("tier0", "pfs"):
            path = base / root / relpath
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    victim = base / "victim"
    (victim / "step" / "sub" / "deep").mkdir(parents=True)
    for relpath, data in FILES.items():  # the same names: a followed link would hit them
        for where in (victim / relpath.split("/")[-1], victim / "step" / relpath.removeprefix("run/")):
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_bytes(b"victim:" + data[:64])
    os.chmod(victim / "a.bin", 0o600)


def snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: kind, mode, and bytes or link target (never following a link)."""
    seen: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st_ = path.lstat()
            if stat.S_ISLNK(st_.st_mode):
                seen[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                seen[str(path)] = ("dir", st_.st_mode)
            else:
                seen[str(path)] = ("file", st_.st_mode, path.read_bytes())
    return seen


def swap(lab: Lab, tree: str, relpath: str, kind: str) -> None:
    """Replace ``tree/relpath`` (if there) by a symlink into the victim, or by a plain file."""
    path = lab.tree(tree) / relpath
    if not os.path.lexists(path) or os.path.realpath(path.parent) != str(path.parent):
        return  # gone, or reached through a link the attacker made: it cannot write the victim
    aside = lab.base / "aside" / f"{tree}-{relpath.replace('/', '_')}-{lab.calls}"
    aside.parent.mkdir(exist_ok=True)
    os.rename(path, aside)
    if kind == "file":
        path.write_bytes(b"a file where a directory was")
    elif kind == "link_dir":
        path.symlink_to(lab.victim / "step" if relpath.startswith("run") else lab.victim)
    else:
        path.symlink_to(lab.victim / path.name)


@contextmanager
def attacked(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Count tierd's file-system calls, swap at the scheduled ones, and check each fd it opens."""
    roots = [str(r) + "/" for r in lab.roots()]

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            if getattr(lab.quiet, "on", False):
                return real(*args, **kwargs)
            with lab.lock:
                lab.calls += 1
                scheduled = lab.swaps.get(lab.calls)
                if scheduled is not None:
                    lab.quiet.on = True
                    try:
                        swap(lab, *scheduled)
                    finally:
                        lab.quiet.on = False
            result = real(*args, **kwargs)
            if name == "open" and isinstance(result, int):
                where = os.readlink(f"/proc/self/fd/{result}")
                if not any((where + "/").startswith(r) for r in roots):
                    lab.opened_outside.append(where)
            return result

        return watched

    for name in WATCHED:
        monkeypatch.setattr(os, name, wrap(name, getattr(os, name)))
    yield
    monkeypatch.undo()


def backend(path: Path, **kw: Any) -> PosixBackend:
    tier = PosixTier(name=path.name, kind="posix", path=path, concurrency=4)
    return PosixBackend(tier, chunk_size=64 * KIB, **kw)


async def run_operation(lab: Lab, operation: str) -> None:
    tier0 = backend(lab.tree("tier0"), single_links=True)
    pfs_root = lab.base / "pfs"
    if operation in ("copy", "copy_batched"):
        await copy(tier0, backend(pfs_root), batched=operation == "copy_batched")
    elif operation == "restore":
        tree = Root(lab.base / "restores", ("target",))
        await asyncio.to_thread(lambda: tree.open(create_top=True).close())
        dst = backend(lab.tree("target"), tree=tree)
        await copy(backend(pfs_root), dst, batched=True, prefix="run/step/")
        await asyncio.to_thread(remove_restored, tree, (), NAMES, fresh=True, placed=set(NAMES))
    elif operation == "remove":
        for tier in (tier0, backend(pfs_root)):
            await tier.remove_checkpoint("run/step", ["run/step/.metadata"], list(FILES)[1:])
    else:
        pfs = backend(pfs_root)
        for relpath, data in FILES.items():
            with suppress(TierdError):
                await pfs.verify(relpath, crc(data))
        with suppress(TierdError):
            [info async for info in pfs.list("run/")]
        await pfs.abort_stale_uploads(0)
        await pfs.remove_leftovers(list(FILES))


async def copy(src: PosixBackend, dst: PosixBackend, *, batched: bool, prefix: str = "") -> None:
    """Each file from ``src`` into ``dst`` (names less ``prefix`` there); errors are allowed."""
    batch = dst.batch() if batched else None
    for relpath, data in FILES.items():
        name = relpath.removeprefix(prefix)
        try:
            if batch is not None and len(data) <= 16 * KIB:
                await batch.write_whole([SmallFile(name, data, crc(data))])
                continue
            reader = await src.open_reader(relpath)
            try:
                await dst.write(WriteRequest(name, reader, crc(data)))
            finally:
                await reader.close()
        except TierdError:
            continue
    if batch is not None:
        with suppress(TierdError):
            await batch.commit()


swaps = st.dictionaries(
    st.integers(min_value=1, max_value=120), st.sampled_from(SWAPS), min_size=1, max_size=4
)


@pytest.mark.parametrize("operation", OPERATIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=swaps)
def test_nothing_outside_the_roots_is_touched(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    operation: str,
    schedule: dict[int, tuple[str, str, str]],
) -> None:
    base = tmp_path_factory.mktemp("hostile")
    build(base)
    if operation == "restore":
        (base / "restores" / "target" / "sub" / "deep").mkdir(parents=True)  # a resumed restore's
    if operation.startswith("copy"):
        shutil.rmtree(base / "pfs" / "run")
    lab = Lab(base, schedule)
    before = snapshot(lab.victim)
    with attacked(lab, monkeypatch), suppress(TierdError):
        asyncio.run(run_operation(lab, operation))
    assert snapshot(lab.victim) == before
    assert lab.opened_outside == []
    shutil.rmtree(base)
