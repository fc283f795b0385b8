"""No module of python/ringloop imports another in a circle, and the server package keeps its
layers (cli > entry | gunicorn > supervisor | reloader > server > its parts).

Two checks over the import graph grimp builds from the source (every import counts: inside a
function, under `TYPE_CHECKING`, lazy or not — a circle through a lazy import is still a
circle of the design):

* the strongly connected components of the whole package: any with more than one module is a
  circle, reported with the import lines that make it;
* `lint-imports` on the contracts in pyproject.toml (`[tool.importlinter]`): the layering.

`ringloop._core` is the native module (Rust): grimp does not see it, so `from . import _core`
reads to it as an import of the package `ringloop` itself. That edge is dropped: `_core` imports
nothing of ours, so it can close no circle.

`test_a_circle_is_caught` proves the check can fail: it copies the package, adds an import that
closes a circle (listen.py importing server.py in a function), and expects it reported.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grimp", reason="pip install import-linter (requirements-dev.txt)")

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "python"
NATIVE_IMPORT = re.compile(r"from \.+ import _core\b|from \.+_core import")


def import_graph(source: Path):
    """grimp's graph of the `ringloop` package found first on `source` (grimp locates the
    package through importlib, so a copy must come first on the path of a fresh interpreter:
    this one has the real package imported already)."""
    import pickle

    code = (
        "import pickle, sys, grimp\n"
        "g = grimp.build_graph('ringloop', cache_dir=None)\n"
        "sys.stdout.buffer.write(pickle.dumps({m: [(i, [d['line_number'] for d in "
        "g.get_import_details(importer=m, imported=i)], [d['line_contents'] for d in "
        "g.get_import_details(importer=m, imported=i)]) for i in "
        "g.find_modules_directly_imported_by(m)] for m in g.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(source), "PATH": str(Path(sys.executable).parent)},
        cwd=source,
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    return Graph(pickle.loads(out))


class Graph:
    """module -> [(imported, line numbers, line contents)], from `import_graph`."""

    def __init__(self, imports: dict) -> None:
        self.imports = imports
        self.modules = set(imports)

    def find_modules_directly_imported_by(self, module: str) -> list[str]:
        return [i for i, _, _ in self.imports[module]]

    def get_import_details(self, importer: str, imported: str) -> list[dict]:
        for i, numbers, contents in self.imports[importer]:
            if i == imported:
                return [
                    {"line_number": n, "line_contents": c}
                    for n, c in zip(numbers, contents, strict=True)
                ]
        return []


def edges(graph, module: str) -> list[str]:
    out = []
    for imported in graph.find_modules_directly_imported_by(module):
        if imported == "ringloop":
            lines = [
                d["line_contents"]
                for d in graph.get_import_details(importer=module, imported=imported)
            ]
            if lines and all(NATIVE_IMPORT.match(line) for line in lines):
                continue  # the native module, not the package (see the module docs)
        out.append(imported)
    return out


def circles(graph) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(edges(graph, root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges(graph, child))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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


def describe(graph, component: list[str]) -> str:
    members = set(component)
    lines = []
    for module in component:
        for imported in edges(graph, module):
            if imported in members:
                for d in graph.get_import_details(importer=module, imported=imported):
                    lines.append(f"  {module}:{d['line_number']}: {d['line_contents']}")
    return "\n".join([" <-> ".join(component), *lines])


def test_no_import_circle_in_python_ringloop():
    graph = import_graph(SOURCE)
    assert "ringloop.server.server" in graph.modules  # the graph is the real package
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(describe(graph, c) for c in found)


def test_the_layer_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "lint-imports is installed with import-linter (requirements-dev.txt)"
    env = {"PYTHONPATH": str(SOURCE), "PATH": str(Path(sys.executable).parent)}
    result = subprocess.run(
        [lint, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_a_circle_is_caught(tmp_path):
    copy = tmp_path / "python"
    shutil.copytree(
        SOURCE / "ringloop", copy / "ringloop", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    listen = copy / "ringloop" / "server" / "listen.py"
    text = listen.read_text()
    # A lazy import, as the old circle's were: listen -> server -> listen.
    listen.write_text(
        text + "\n\ndef _server():\n    from .server import Server\n\n    return Server\n"
    )
    graph = import_graph(copy)
    found = circles(graph)
    assert any({"ringloop.server.listen", "ringloop.server.server"} <= set(c) for c in found), found
    assert "ringloop.server.listen:" in describe(graph, found[0])
