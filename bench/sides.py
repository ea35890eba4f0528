"""The tierd trees a benchmark measures: this checkout, and with ``--against REV`` another.

``python -m bench --against REV`` checks REV out in a scratch worktree
(``git worktree add --detach /tmp/tierd-bench-<commit>-<random>``, removed when the run ends) and
hands its path to the benchmarks in ``$TIERD_BENCH_AGAINST`` (set it yourself to measure
against a tree that is already checked out). Each side's daemons run on this interpreter and
venv with ``PYTHONPATH=<tree>`` (the dependencies are the same) and ``cwd=<tree>``, and each
side's catalog is migrated and written by that tree's own tierd (``bench/record_catalog.py``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import REPO
from tests.fixtures.s3servers import die_with_parent

__all__ = ["AGAINST_VARIABLE", "Side", "against_from_env", "resolve", "scratch_worktree", "this_tree"]

#: Where ``python -m bench --against`` tells the benchmarks which tree to compare with.
AGAINST_VARIABLE = "TIERD_BENCH_AGAINST"
_RECORD_SCRIPT = Path(__file__).resolve().parent / "record_catalog.py"


@dataclass(frozen=True)
class Side:
    """One tierd tree: ``name`` in results (``tierd`` or ``against``), its root, what it is."""

    name: str
    root: Path
    source: str

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (this environment) without ``TIERD_*`` overrides, this tree's tierd first on the path."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("TIERD_")}
        env["PYTHONPATH"] = str(self.root)
        return env

    def spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        """Start ``argv`` in this tree (its environment and directory), output written to ``log``;
        it dies with this process."""
        with log.open("wb") as out:
            return subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                cwd=self.root,
                preexec_fn=die_with_parent,
            )

    def record(self, catalog: Path, config: dict[str, Any], spec: dict[str, Any]) -> int:
        """A fresh SQLite catalog at ``catalog`` holding ``spec``'s checkpoint, written by this tree.

        ``spec``: ``Dataset.record_spec()``, plus ``only_on`` (see ``bench/record_catalog.py``).
        Returns the checkpoint's id; raises RuntimeError with the script's error output.
        """
        body = json.dumps({**spec, "catalog": str(catalog), "config": config})
        done = subprocess.run(
            [sys.executable, "-P", str(_RECORD_SCRIPT)],
            input=body,
            capture_output=True,
            text=True,
            cwd=self.root,
            env=self.env(),
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"recording the checkpoint with {self.source} failed:\n{done.stderr[-3000:]}")
        return int(json.loads(done.stdout.splitlines()[-1])["checkpoint_id"])


def _git(*args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@functools.cache
def this_tree() -> Side:
    """This checkout; its source is the commit, with a digest of uncommitted changes under ``tierd/``."""
    return Side("tierd", REPO, _describe(REPO))


def _describe(root: Path) -> str:
    commit = _git("rev-parse", "--short", "HEAD", cwd=root)
    if not _git("status", "--porcelain", "--", "tierd", cwd=root):
        return commit
    digest = hashlib.sha256(_git("diff", "HEAD", "--", "tierd", cwd=root).encode())
    for name in sorted(_git("ls-files", "--others", "--exclude-standard", "--", "tierd", cwd=root).split()):
        digest.update(name.encode() + (root / name).read_bytes())
    return f"{commit}+uncommitted:{digest.hexdigest()[:12]}"


def against_from_env() -> Side | None:
    """The tree named by ``$TIERD_BENCH_AGAINST``, if any; ValueError when it holds no tierd."""
    value = os.environ.get(AGAINST_VARIABLE)
    if not value:
        return None
    root = Path(value).resolve()
    if not (root / "tierd" / "__init__.py").is_file():
        raise ValueError(f"{AGAINST_VARIABLE}={value}: no tierd package there")
    return Side("against", root, _describe(root))


def resolve(rev: str) -> str:
    """The full commit hash ``rev`` names in this repository; ValueError when it names none."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except RuntimeError:
        raise ValueError(f"--against {rev}: not a commit of {REPO}") from None


@contextmanager
def scratch_worktree(rev: str, parent: Path = Path("/tmp")) -> Iterator[Path]:
    """``rev`` checked out (detached) as ``<parent>/tierd-bench-<commit>-<random>``; removed afterwards.

    One per run, so two runs against the same commit never remove each other's tree; one left by
    a killed run goes with ``git worktree prune`` once its directory is deleted.
    """
    commit = resolve(rev)
    path = Path(tempfile.mkdtemp(prefix=f"tierd-bench-{commit[:12]}-", dir=parent))
    _git("worktree", "add", "--detach", str(path), commit)
    try:
        yield path
    finally:
        _git("worktree", "remove", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)
