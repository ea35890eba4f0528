"""No module of tierd over 500 lines and no function over 50: a seam is found before it grows.

Alembic revisions are exempt: each is a frozen record of the schema at one step, never
rewritten once released.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tierd

ROOT = Path(tierd.__file__).resolve().parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 50


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "versions" not in p.relative_to(ROOT).parts)


def test_no_module_is_over_500_lines() -> None:
    over = {
        str(p.relative_to(ROOT)): n for p in _modules() if (n := p.read_text().count("\n")) > MAX_MODULE_LINES
    }
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_function_is_over_50_lines() -> None:
    over: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    over[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"
