"""`make` keeps the venv's build tools current: pip, setuptools and wheel come from their hash-locked versions
(requirements/bootstrap.txt) when the venv is made and by `make dev` (an existing venv too), so the setuptools
of `python -m venv` (65.5, affected by CVE-2024-6345 and CVE-2025-47273) does not stay."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"pip", "setuptools", "wheel"}


def recipe(target: str) -> list[str]:
    """The command lines of a Makefile target."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    body = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.MULTILINE)
    assert body, target
    return [line.strip() for line in body.group(1).splitlines()]


def upgrades(lines: list[str]) -> set[str]:
    """The build tools a recipe installs: those pinned in requirements/bootstrap.txt, installed from it with
    --require-hashes."""
    found: set[str] = set()
    for line in lines:
        words = line.split()
        if "install" in words and "--require-hashes" in words and "requirements/bootstrap.txt" in words:
            found |= TOOLS & set(_locked().keys())
    return found


def _locked() -> dict[str, str]:
    pins = re.findall(
        r"^([a-z0-9._-]+)==(\S+)", (ROOT / "requirements/bootstrap.txt").read_text(), re.MULTILINE
    )
    return dict(pins)


@pytest.mark.parametrize("target", ["$(BIN)/python", "dev"])
def test_build_tools_upgraded_by_make(target: str) -> None:
    assert upgrades(recipe(target)) == TOOLS


def test_build_tools_upgrade_before_the_project_is_installed() -> None:
    lines = recipe("dev")
    first_upgrade = next(i for i, line in enumerate(lines) if upgrades([line]))
    assert first_upgrade < next(i for i, line in enumerate(lines) if "-e" in line.split())


def test_build_tools_locked_setuptools_outside_the_cve_ranges() -> None:
    """The setuptools every new venv gets: >= 78.1.1 fixes both CVEs."""
    parts = tuple(int(p) for p in re.findall(r"\d+", _locked()["setuptools"])[:3])
    assert parts >= (78, 1, 1), _locked()["setuptools"]


def test_build_tools_setuptools_outside_the_cve_ranges() -> None:
    """The venv these tests run in (made by `make dev`): setuptools >= 78.1.1 fixes both CVEs."""
    parts = tuple(int(p) for p in re.findall(r"\d+", version("setuptools"))[:3])
    assert parts >= (78, 1, 1), version("setuptools")
