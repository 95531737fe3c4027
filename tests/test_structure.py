"""The package's shape, checkable by anyone: no import cycle, no module over 800 lines.

The import graph is read with ``ast`` from the source, not from ``sys.modules``: every
``import`` and ``from ... import`` statement counts as an edge, wherever it stands, at the top,
inside a function (a lazy import still ties the two modules together: whoever reads one needs
the other) or under ``if TYPE_CHECKING:`` (the types tie them as well). ``from . import name``
is an edge to the submodule ``name`` when there is one, else to the package. A package's
``__init__`` is not an implicit parent of its submodules here: importing ``a.b`` runs ``a``'s
``__init__`` first, but that is the interpreter's order, not a dependency ``a.b`` declares.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "otel_tooleval"
MAX_LINES = 800


def modules(root: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        found[".".join(parts)] = (path, package)
    return found


def _known(name: str, known: Mapping[str, object]) -> str | None:
    """``name`` or its nearest enclosing module inside the package; None outside it."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, package: bool,
               known: Mapping[str, object]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its source."""
    here = name.split(".") if package else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: Iterable[str]
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1]
                                + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                     for alias in node.names]
        else:
            continue
        for target in names:
            module = _known(target, known)
            if module is not None and module != name:
                targets.add(module)
    return targets


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, package, known)
            for name, (path, package) in known.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each
    sorted; a self-import is not reported."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _describe(component: list[str], graph: Mapping[str, set[str]]) -> str:
    members = set(component)
    return "; ".join(f"{name} -> {', '.join(sorted(graph[name] & members))}"
                     for name in component)


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "otel_tooleval.serve.server" in graph       # the walk saw the package
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(_describe(c, graph) for c in found)


def test_no_module_is_over_800_lines() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines())
             for name, (path, _) in modules().items()}
    assert len(sizes) > 40
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_tool_trajectory_is_under_600_lines() -> None:
    path = PACKAGE / "graders" / "tool_trajectory.py"
    assert len(path.read_text(encoding="utf-8").splitlines()) < 600


# -- the checker itself, on a package written for the test --------------------------------------

def _write(root: Path, files: Mapping[str, str]) -> Path:
    package = root / "pkg"
    for relative, text in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


@pytest.mark.parametrize(("files", "expected"), [
    ({"__init__.py": "", "a.py": "from .b import x\n", "b.py": "x = 1\n"}, []),
    ({"__init__.py": "", "a.py": "from .b import x\n", "b.py": "from .a import y\n"},
     [["pkg.a", "pkg.b"]]),
    # A lazy import inside a function is an edge.
    ({"__init__.py": "", "a.py": "from .b import x\n",
      "b.py": "def f():\n    from .a import y\n"}, [["pkg.a", "pkg.b"]]),
    # So is one under TYPE_CHECKING.
    ({"__init__.py": "", "a.py": "from .b import x\n",
      "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import Y\n"},
     [["pkg.a", "pkg.b"]]),
    # Absolute imports, submodules named in `from . import`, and a longer circle.
    ({"__init__.py": "", "sub/__init__.py": "", "sub/c.py": "import pkg.a\n",
      "a.py": "from . import b\n", "b.py": "from .sub.c import z\n"},
     [["pkg.a", "pkg.b", "pkg.sub.c"]]),
    # A package importing its own submodules, which import the package back.
    ({"__init__.py": "from .a import x\n", "a.py": "from pkg import y\n"},
     [["pkg", "pkg.a"]]),
])
def test_the_cycle_check_finds_what_it_should(tmp_path: Path, files: dict[str, str],
                                              expected: list[list[str]]) -> None:
    package = _write(tmp_path, files)
    assert sorted(cycles(import_graph(package))) == expected


# -- docs/performance.md: a reference page; the history in docs/performance-log.md ---------------

DOCS = PACKAGE.parent / "docs"


def test_the_performance_page_is_a_reference_under_300_lines() -> None:
    page = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert len(page.splitlines()) < 300
    for part in ("## Reproducing them", "## Decisions", "## Throughput and memory",
                 "(performance-log.md)"):
        assert part in page


def test_sections_cited_by_name_are_in_the_performance_log() -> None:
    """Comments and benches cite a measurement by the log's file name, a comma and the section
    name in double quotes: each name (up to a trailing "...") is a heading or a bold lead-in
    of the log."""
    log = (DOCS / "performance-log.md").read_text(encoding="utf-8")
    titles = [line.lstrip("#* ").rstrip("*") for line in log.splitlines()
              if line.startswith(("#", "**"))]
    cited: dict[str, str] = {}
    root = PACKAGE.parent
    for path in [*PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py"), *DOCS.rglob("*.md")]:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r'performance(?:-log)?\.md,? \(?"([^"\n]+)"', text):
            cited[match.group(1)] = str(path.relative_to(root))
    assert len(cited) >= 5
    missing = {name: where for name, where in cited.items()
               if not any(title.startswith(name.rstrip(". ")) for title in titles)}
    assert not missing, f"cited sections not in docs/performance-log.md: {missing}"
