"""Every library ``tierd/`` imports comes with ``pip install tierd``, not only with the dev extra.

Each import in the package (at the top of a module or inside a function, but not one under
``if TYPE_CHECKING:``, nor in ``tierd/integrations/``, which imports the training job's own
libraries) is mapped to the distribution that installs it; that distribution must
be among ``pyproject.toml``'s runtime dependencies or what they require in turn (read from the
installed distributions' metadata). A library the tests install beside the daemon (the dev
extra) hides a missing dependency from every other test: azure-storage-blob brought in
cryptography, which a GCS tier's service-account key needs to sign its grant.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: The training libraries' integrations import the job's own torch, lightning, transformers.
INTEGRATIONS = ROOT / "tierd" / "integrations"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imports(tree: ast.AST) -> set[str]:
    """The top-level names of every module imported outside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _runtime_closure() -> set[str]:
    """The runtime dependencies and, recursively, what they require on this Python (no extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(d) for d in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = _normal(requirement.name)
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        todo += [Requirement(r) for r in metadata.requires(name) or []]
    return seen


def test_every_library_the_daemon_imports_is_a_runtime_dependency() -> None:
    imported: set[str] = set()
    for path in (ROOT / "tierd").rglob("*.py"):
        if INTEGRATIONS not in path.parents:
            imported |= _imports(ast.parse(path.read_text(), str(path)))
    third_party = imported - set(sys.stdlib_module_names) - {"tierd", "__future__"}
    providers = metadata.packages_distributions()
    closure = _runtime_closure()
    missing = {
        module: sorted(providers.get(module, ["(not installed)"]))
        for module in sorted(third_party)
        if not any(_normal(dist) in closure for dist in providers.get(module, []))
    }
    assert missing == {}, f"imported by tierd/ but not installed by `pip install tierd`: {missing}"
