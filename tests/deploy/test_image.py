"""The container image, built from the Dockerfile on a Debian base and run as an operator would.

Each run is ``--read-only --cap-drop ALL`` with two tiers as mounted host directories and a
tmpfs for the SQLite catalog, the API published on 127.0.0.1: the image's HEALTHCHECK turns
healthy, ``/readyz`` names the node given in ``TIERD_NODE``, a step written to tier 0 is copied
to tier 1, and ``docker stop`` ends it with exit status 0. As its default user (uid 8470, no
capability) the copies are the daemon's, 0600; as root with the capabilities
docs/operations.md names they keep their owner, group, mode and setgid bit.

Slow: the image is built once per module (cold, ~5 minutes: see ``tests.fixtures.docker``;
warm, ~1 s of Docker's cache) and each run takes 15-20 s (the container imports tierd and
migrates its catalog before it answers; then a copy and a drain).
"""

from __future__ import annotations

import json
import os
import re
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fixtures import http
from tests.fixtures.docker import KEEP_OWNERS_CAPABILITIES, Built, build_image, docker
from tests.integration.daemon_helpers import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("image"),
    pytest.mark.usefixtures("docker_engine"),
    pytest.mark.timeout(1800),  # the first test's set-up builds the image: ~5 minutes cold
]

IMAGE_UID = 8470
JOB_UID, JOB_GID = 1234, 1235
READY_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def image(docker_engine: None) -> Built:
    return build_image("tierd-test:pytest")


@dataclass
class Site:
    """A node's directories as the container sees them: tier 0, tier 1 and the config."""

    root: Path

    @property
    def nvme(self) -> Path:
        return self.root / "nvme"

    @property
    def pfs(self) -> Path:
        return self.root / "pfs"

    def make(self, pfs_owner: int) -> None:
        (self.nvme / "demo").mkdir(parents=True)
        self.pfs.mkdir()
        os.chown(self.pfs, pfs_owner, pfs_owner)
        (self.root / "etc").mkdir()
        config = {
            "catalog": {"url": "sqlite:////var/lib/tierd/catalog.db"},
            # Published on the host's loopback only (-p 127.0.0.1:...), so anonymous is meant.
            "api": {"listen": "0.0.0.0:8470", "allow_anonymous": True},
            "drain_timeout_seconds": 5,
            "log": {"format": "json"},
            "watch": [{"path": "/tiers/nvme/demo", "run": "demo", "format": "marker", "marker": "done"}],
            "tiers": [
                {"name": "nvme", "kind": "posix", "path": "/tiers/nvme"},
                {"name": "pfs", "kind": "posix", "path": "/tiers/pfs"},
            ],
        }
        (self.root / "etc" / "config.yaml").write_text(yaml.safe_dump(config))

    def write_step(self, step: int, owner: tuple[int, int], *, others: bool) -> None:
        """A job's step: written aside, owned by ``owner``, then renamed in (its marker inside).

        Readable by its owner and group only, or by ``others`` too.
        """
        staged = self.nvme / f".stage{step}"
        (staged / "shards").mkdir(parents=True)
        (staged / "shards" / "model.bin").write_bytes(os.urandom(200_000))
        (staged / "done").write_text("ok\n")
        extra = 0o005 if others else 0
        modes = {staged: 0o750, staged / "shards": 0o2750}  # a shared tree's setgid directory
        modes |= {staged / "shards" / "model.bin": 0o640, staged / "done": 0o640}
        for path, mode in modes.items():
            os.chown(path, *owner)
            os.chmod(path, mode | (extra if path.is_dir() else extra & 0o004))
        staged.rename(self.nvme / "demo" / f"step{step}")


@dataclass
class Container:
    name: str
    url: str

    def inspect(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(docker("inspect", self.name).stdout)[0]
        return found


@contextmanager
def running(image: Built, site: Site, uid: int, *options: str) -> Iterator[Container]:
    """The image run read-only with every capability dropped (plus ``options``) as ``uid``, a
    tmpfs its own for the catalog; removed after, its log in the failure of what failed."""
    name = f"tierd-test-{uuid.uuid4().hex[:10]}"
    mounts = [f"--volume={site.root / 'etc'}:/etc/tierd:ro"]
    mounts += [f"--volume={site.nvme}:/tiers/nvme", f"--volume={site.pfs}:/tiers/pfs"]
    mounts += [f"--tmpfs=/var/lib/tierd:uid={uid},gid={uid},mode=0750"]
    docker(
        "run", "--detach", f"--name={name}", "--read-only", "--cap-drop=ALL", f"--user={uid}:{uid}",
        *options, *mounts, "--env=TIERD_NODE=node-7", "--publish=127.0.0.1::8470",
        "--health-interval=1s",  # the image's check, asked every second rather than every 30
        image.tag,
    )  # fmt: skip
    try:
        address = docker("port", name, "8470").stdout.split()[0]
        yield Container(name, f"http://{address}")
    except AssertionError as exc:
        logs = docker("logs", "--tail=40", name, check=False)
        raise AssertionError(f"{exc}\ncontainer log:\n{logs.stdout}{logs.stderr}") from exc
    finally:
        docker("rm", "--force", name, check=False)


def _answer(url: str) -> dict[str, Any] | None:
    try:
        response = http.get(url, timeout=5)
    except httpx.TransportError:
        return None
    body: dict[str, Any] = response.json()
    return body if response.status_code == 200 else None


def _health(container: Container) -> str | None:
    status: str = container.inspect()["State"]["Health"]["Status"]
    return status if status == "healthy" else None


def _copied(container: Container, step: int) -> dict[str, Any] | None:
    items = (_answer(f"{container.url}/v1/checkpoints") or {"items": []})["items"]
    states = {r["tier"]: r["state"] for i in items if i["step"] == step for r in i["replicas"]}
    assert "failed" not in states.values(), items
    return items[0] if states == {"nvme": "verified", "pfs": "verified"} else None


def _serve_a_step(image: Built, site: Site, uid: int, *options: str, others: bool) -> dict[str, Any]:
    """Run the image, wait for healthy and ready, copy step 5, stop it; what /readyz said."""
    with running(image, site, uid, *options) as container:
        ready = wait_for(lambda: _answer(f"{container.url}/readyz"), READY_TIMEOUT, "/readyz")
        wait_for(lambda: _health(container), READY_TIMEOUT, "the image's HEALTHCHECK to pass")
        site.write_step(5, (JOB_UID, JOB_GID), others=others)
        wait_for(lambda: _copied(container, 5), 60, "step 5 verified on tier 1", interval=0.2)
        docker("stop", "--time=30", container.name, timeout=60)
        state = container.inspect()["State"]
        assert (state["Status"], state["ExitCode"]) == ("exited", 0), state
    return ready


def _owners(root: Path) -> dict[str, tuple[int, int, str]]:
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(root))] = (info.st_uid, info.st_gid, stat.filemode(info.st_mode))
    return found


def test_the_default_user_needs_no_capability_and_keeps_copies_to_itself(
    image: Built, tmp_path: Path
) -> None:
    """uid 8470 reads what it may read; it may not give files away, so copies stay its own, 0600."""
    site = Site(tmp_path)
    site.make(pfs_owner=IMAGE_UID)
    ready = _serve_a_step(image, site, IMAGE_UID, others=True)  # readable by 8470 (or a group of its)
    assert ready["node"] == "node-7"
    step = site.pfs / "demo" / "step5"
    assert _owners(step) == {
        "done": (IMAGE_UID, IMAGE_UID, "-rw-------"),
        "shards": (IMAGE_UID, IMAGE_UID, "drwx------"),
        "shards/model.bin": (IMAGE_UID, IMAGE_UID, "-rw-------"),
    }


def test_as_root_with_the_documented_capabilities_copies_keep_their_owners(
    image: Built, tmp_path: Path
) -> None:
    """--user 0 plus exactly KEEP_OWNERS_CAPABILITIES: a job's private step is read and copied
    with its owner, group, mode and setgid directory (CHOWN, FOWNER, FSETID), into directories
    already given to the job's user (DAC_OVERRIDE)."""
    site = Site(tmp_path)
    site.make(pfs_owner=0)
    adds = [f"--cap-add={name}" for name in KEEP_OWNERS_CAPABILITIES]
    _serve_a_step(image, site, 0, *adds, others=False)
    assert _owners(site.pfs / "demo" / "step5") == {
        "done": (JOB_UID, JOB_GID, "-rw-r-----"),
        "shards": (JOB_UID, JOB_GID, "drwxr-s---"),
        "shards/model.bin": (JOB_UID, JOB_GID, "-rw-r-----"),
    }


def test_the_image_is_labelled_non_root_and_built_from_a_small_context(image: Built) -> None:
    """OCI labels from the build arguments; uid 8470; the HEALTHCHECK asks /livez; .dockerignore
    leaves a developer's .venv, var/ and .git out of what is sent to the builder."""
    config = json.loads(docker("image", "inspect", image.tag).stdout)[0]["Config"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.revision"] == image.args["REVISION"]
    assert labels["org.opencontainers.image.version"] == image.args["VERSION"]
    assert labels["org.opencontainers.image.base.name"] == image.args["BASE"]
    assert labels["org.opencontainers.image.title"] == "tierd"
    assert config["User"] == f"{IMAGE_UID}:{IMAGE_UID}"
    assert "http://127.0.0.1:8470/livez" in " ".join(config["Healthcheck"]["Test"])
    sent = re.search(r"Sending build context to Docker daemon\s+([\d.]+)([kMG]?B)", image.output)
    assert sent is not None, image.output[:2000]
    size = float(sent[1]) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[sent[2]]
    assert size < 5e6, sent[0]
