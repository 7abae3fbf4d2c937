"""Names and packages that explain themselves: the core layer and the `kb` package import in one
direction — no module imports (directly or through others, lazily or not) a module that imports it back —
and the adapters are packages per storage family (`adapters/sqlite/`, `adapters/dynamodb/`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"knowledge_core": ROOT / "layers/knowledge_core/knowledge_core", "kb_cli": ROOT / "src/kb_cli"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in PACKAGES.values():
        for path in root.rglob("*.py"):
            parts = path.relative_to(root.parent).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of ours that `name` imports, at module level or inside a function."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            # `from . import sibling` imports the sibling module (its package is already importing), as
            # `from .sibling import x` does; only names that are not submodules come from the package.
            whole = [] if node.module is None and len(submodules) == len(node.names) else [target]
            candidates = [*whole, *submodules]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        out |= {c for c in candidates if c in known and c != name}
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_k_pipe_no_import_cycles_in_the_layer_or_the_cli() -> None:
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    assert _cycles(graph) == []


def test_adapters_are_packages_per_storage_family() -> None:
    adapters = PACKAGES["knowledge_core"] / "adapters"
    for family, modules in {
        "sqlite": {"db", "store", "state", "turns", "ledger", "jobs", "search"},
        "dynamodb": {"table", "state", "turns", "ledger", "jobs"},
    }.items():
        assert {p.stem for p in (adapters / family).glob("*.py")} >= modules | {"__init__"}
    flat = {p.stem for p in adapters.glob("*.py")}
    assert not flat & {"sqlite_db", "sqlite_fts", "sqlite_state", "dynamodb", "ledger_dynamodb"}


def test_no_two_edge_modules_share_a_name() -> None:
    """The MCP edge of the layer and the stdio runner of `kb mcp` are told apart by name."""
    assert (PACKAGES["knowledge_core"] / "mcp_server.py").exists()
    assert (
        not (PACKAGES["kb_cli"] / "mcp_server.py").exists() and (PACKAGES["kb_cli"] / "mcp_stdio.py").exists()
    )
