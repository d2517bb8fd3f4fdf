"""No module of ocrr imports another module's private names: a name that another module needs
is public where it is defined (DESIGN.md: the shape that keeps each rule written once)."""

from __future__ import annotations

import ast
from pathlib import Path

import ocrr

SRC = Path(ocrr.__file__).parent
ALLOWED = {"__version__"}


def private_imports(root: Path) -> list[str]:
    """``path:line: from module import _name`` for every import of a private name from ocrr."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("ocrr"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and alias.name not in ALLOWED:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    found = private_imports(SRC)
    assert not found, "private names imported across modules (make them public where defined):\n" + "\n".join(found)


def test_the_check_finds_a_private_import(tmp_path):
    package = tmp_path / "ocrr"
    package.mkdir()
    (package / "a.py").write_text("from ocrr.b import _hidden, shown\nfrom ocrr import __version__\n")
    assert private_imports(package) == ["ocrr/a.py:1: from ocrr.b import _hidden"]
