"""The build hook of ``tierd-client``: its files come from the repository's one ``tierd/`` tree.

The client's distribution ships :data:`CLIENT_PATHS`; the daemon's (the repository's
``pyproject.toml``) ships the rest of ``tierd/`` and excludes exactly these, and depends on
this one. An editable install copies nothing: ``dev-mode-dirs`` puts the repository's root,
where ``tierd/`` is whole, on ``sys.path`` (a copy in site-packages would shadow the tree).
"""

from __future__ import annotations

import os
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: What tierd-client ships: the package's root (``__version__``), the errors, the client, the integrations.
CLIENT_PATHS = (
    "tierd/__init__.py",
    "tierd/py.typed",
    "tierd/errors.py",
    "tierd/client",
    "tierd/integrations",
)


class ClientFiles(BuildHookInterface):  # type: ignore[type-arg]
    """Force-includes :data:`CLIENT_PATHS` into the wheel and the sdist (not into an editable wheel)."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Add the client's files to what this build ships."""
        if version == "editable":
            return
        tree = os.path.dirname(self.root)  # the repository, beside client/
        if not os.path.isdir(os.path.join(tree, "tierd", "client")):
            tree = self.root  # an sdist, which holds them at its own root
        for path in CLIENT_PATHS:
            build_data["force_include"][os.path.join(tree, path)] = path
