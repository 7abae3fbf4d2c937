"""The docs' Source layout page names every top-level folder, package and module folder of the tree (a new
one without a line there fails here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _layout() -> str:
    page = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    return page.split("# Layout", 1)[1].split("```", 2)[1]


def _ignored() -> set[str]:
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return {line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#")}


def _folders(path: Path) -> list[str]:
    skip = _ignored() | {"__pycache__", "results", "node_modules"}
    return sorted(
        p.name
        for p in path.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in skip
        and not p.name.endswith(".egg-info")
    )


def test_layout_names_every_top_level_folder_and_package() -> None:
    layout = _layout()
    starts = {line.split()[0] for line in layout.splitlines() if line.strip()}
    for folder in _folders(ROOT):
        assert any(s.startswith(f"{folder}/") for s in starts), f"docs/layout.md lacks {folder}/"
    for package in _folders(ROOT / "src"):
        assert f"src/{package}/" in starts, f"docs/layout.md lacks src/{package}/"
    core = ROOT / "layers" / "knowledge_core" / "knowledge_core"
    for sub in _folders(core):
        assert f"knowledge_core/{sub}/" in starts, f"docs/layout.md lacks knowledge_core/{sub}/"
    for module in sorted(p.stem for p in core.glob("*.py") if p.stem != "__init__"):
        assert re.search(rf"\b{module}\.py\b", layout), f"docs/layout.md lacks knowledge_core/{module}.py"
    for adapter in sorted(p.stem for p in (core / "adapters").glob("*.py") if p.stem != "__init__"):
        assert f"{adapter}.py" in layout, f"docs/layout.md lacks adapters/{adapter}.py"
    for function in _folders(ROOT / "functions"):
        assert re.search(rf"\b{function}\b", layout), f"docs/layout.md lacks functions/{function}"
    tests_line = next(s for s in starts if s.startswith("tests/"))
    for layer in _folders(ROOT / "tests"):
        assert layer in tests_line.split("/", 1)[1].split("|"), f"docs/layout.md lacks tests/{layer}"
