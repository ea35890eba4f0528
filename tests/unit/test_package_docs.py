"""Every package's docstring names each of its modules and subpackages, so a newcomer can find their way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tierd

ROOT = Path(tierd.__file__).resolve().parent
PACKAGES = sorted(p.parent for p in ROOT.rglob("__init__.py") if "versions" not in p.parts)


def _members(package: Path) -> list[str]:
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    subpackages = [p.name for p in package.iterdir() if (p / "__init__.py").exists()]
    return sorted(modules + subpackages)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_the_package_docstring_names_each_module(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [name for name in _members(package) if f"``{name}``" not in doc and f"{name}/" not in doc]
    assert not missing, f"{package.relative_to(ROOT.parent)}/__init__.py docstring does not name {missing}"
