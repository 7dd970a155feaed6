"""Import circles among a package's modules, found on grimp's import graph (import-linter's).

A circle is a strongly connected set of two or more modules: each imports, directly or through
the others, each of the rest. Deferred imports (inside a function) and ``TYPE_CHECKING`` imports
count: they hide a dependency, they do not remove it. A package's ``__init__`` importing its own
submodules is not counted (a re-export, not a dependency of the parts on the whole) unless a
submodule imports the package back.
"""

from __future__ import annotations

import sys

import grimp

__all__ = ["import_cycles"]


def _edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module in graph.modules:
        out[module] = set(graph.find_modules_directly_imported_by(module))
    return out


def import_cycles(package: str) -> list[list[str]]:
    """Each import circle of `package` (importable, on sys.path) as its sorted modules."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges = _edges(graph)
    # Tarjan's strongly connected components, iterative (module graphs run deep).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in edges:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def main(packages: list[str]) -> int:
    """scripts/test's check: each circle printed, exit 1 if any."""
    found = [(p, c) for p in packages for c in import_cycles(p)]
    for package, cycle in found:
        print(f"import circle in {package}: {' <-> '.join(cycle)}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["sglang_sentinel", "sglang_sentinel_sim"]))
