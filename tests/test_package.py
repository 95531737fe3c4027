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
    assert out.strip() == "['otel_tooleval']"
