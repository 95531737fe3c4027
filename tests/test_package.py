"""The package's public names, and that importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import otel_tooleval


def test_every_public_name_imports() -> None:
    assert set(otel_tooleval.__all__) == {"__version__", *otel_tooleval._EXPORTS}
    for name in otel_tooleval.__all__:
        assert getattr(otel_tooleval, name) is not None, name
    from otel_tooleval import grader, install, load_config  # noqa: F401


def test_importing_the_package_loads_no_grader_machinery() -> None:
    code = ("import sys, otel_tooleval; "
            "print(sorted(m for m in sys.modules if m.startswith('otel_tooleval')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['otel_tooleval', 'otel_tooleval._version']"


def test_the_version_lives_in_its_own_module() -> None:
    import ast
    import re
    from pathlib import Path

    from otel_tooleval._version import __version__

    root = Path(otel_tooleval.__file__).parent
    pyproject = (root.parent / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)[1] == __version__  # type: ignore[index]
    # No module of the package takes a name from the package's __init__ (``from . import
    # __version__``): only submodules are imported that way.
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module is None and node.level:
                target = path.parent
                for _ in range(node.level - 1):
                    target = target.parent
                for alias in node.names:
                    assert (target / alias.name).is_dir() or (
                        target / f"{alias.name}.py").is_file(), (path, alias.name)
