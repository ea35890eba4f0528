"""``tierd_build_info{version,revision}``: what is running, down to the git revision it was built from.

The revision is baked in at build time, where the build knows it: a ``REVISION`` file in the
package (``git rev-parse HEAD > tierd/REVISION`` before ``pip install``), else pip's record
of an install from a git URL (PEP 610's ``direct_url.json``), else ``unknown``. Read once, at
start; anything that is not a plain hexadecimal revision counts as ``unknown`` (a label
value stays short and bounded).
"""

from __future__ import annotations

import json
import re
from importlib import metadata, resources
from importlib.resources.abc import Traversable

from prometheus_client import CollectorRegistry, Gauge

from tierd import __version__

__all__ = ["REVISION_FILE", "build_info", "revision"]

#: The file, in the ``tierd`` package, a build writes the revision into.
REVISION_FILE = "REVISION"
UNKNOWN = "unknown"
_REVISION = re.compile(r"[0-9a-f]{7,64}")


def revision() -> str:
    """The git revision tierd was built from, or ``unknown``."""
    for found in (_from_file(), _from_pip()):
        if found is not None and _REVISION.fullmatch(found):
            return found
    return UNKNOWN


def _package() -> Traversable:
    return resources.files("tierd")


def _from_file() -> str | None:
    try:
        return (_package() / REVISION_FILE).read_text().strip().lower()
    except (OSError, UnicodeDecodeError):
        return None


def _from_pip() -> str | None:
    try:
        text = metadata.distribution("tierd").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (ValueError, AttributeError):
        return None
    return commit.lower() if isinstance(commit, str) else None


def build_info(registry: CollectorRegistry) -> None:
    """Register ``tierd_build_info`` (1, labelled with the version and revision) on ``registry``."""
    gauge = Gauge(
        "tierd_build_info",
        "tierd's version and the git revision it was built from",
        ["version", "revision"],
        registry=registry,
    )
    gauge.labels(__version__, revision()).set(1)
