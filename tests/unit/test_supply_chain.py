"""Supply chain (security review finding L3): hash-locked requirements consistent with pyproject.toml, the
layer shipping exactly the versions CI tests, its CycloneDX SBOM, and the pip-audit gate's verdicts."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_supply_{name}", ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lock = _script("lock")
audit = _script("audit")


def _parse(path: Path) -> list[dict[str, Any]]:
    """A lock's pins: name, version, marker, hashes (ValueError for any other line)."""
    pins = lock.parse_pins(path.read_text())
    return [{"name": n, "version": v, "marker": m, "hashes": h} for (n, v, m), h in pins.items()]


def _applies(pin: dict[str, Any]) -> bool:
    return not pin["marker"] or Requirement(f"x; {pin['marker']}").marker.evaluate()  # type: ignore[union-attr]


def _here(path: Path) -> dict[str, str]:
    """name -> version of the pins that this interpreter and platform install."""
    return {pin["name"]: pin["version"] for pin in _parse(path) if _applies(pin)}


def test_supply_chain_every_lock_is_current_with_its_inputs() -> None:
    """L3: each lock's header records the digest of the inputs it was compiled from (`make lock`)."""
    assert lock.stale_locks() == [], "stale lock files: run `make lock` and commit them"


def test_supply_chain_a_changed_input_makes_its_locks_stale(tmp_path: Path) -> None:
    """L3: a dependency added to pyproject.toml, or a line to layer.in, without `make lock` is caught."""
    for name in {*lock.LOCKS, "pyproject.toml", "requirements/bootstrap.in", "requirements/layer.in"}:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    assert lock.stale_locks(tmp_path) == []
    layer_in = tmp_path / "requirements" / "layer.in"
    layer_in.write_text(layer_in.read_text() + "pyyaml\n")
    assert lock.stale_locks(tmp_path) == [lock.LAYER]
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"tqdm>=4.66",', '"tqdm>=4.66",\n  "rich>=13",'))
    assert set(lock.stale_locks(tmp_path)) == set(lock.LOCKS)  # the others are compiled against dev.txt


def test_supply_chain_every_locked_package_is_pinned_exactly_with_sha256_hashes() -> None:
    """L3: nothing unpinned, no URL or editable line, and a hash for every pin (pip --require-hashes)."""
    for name in lock.LOCKS:
        pins = _parse(ROOT / name)
        assert pins, name
        assert all(pin["hashes"] for pin in pins), [pin["name"] for pin in pins if not pin["hashes"]]


def test_supply_chain_dev_lock_satisfies_every_pyproject_requirement() -> None:
    """L3: the versions locked for this platform are inside pyproject.toml's ranges (project and extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    locked = _here(ROOT / lock.DEV)
    wanted = list(project["dependencies"])
    for extra in ("semantic", "embedded", "dev"):
        wanted += project["optional-dependencies"][extra]
    checked = 0
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name == "agent-knowledge-service" or not (
            requirement.marker is None or requirement.marker.evaluate({**default_environment(), "extra": ""})
        ):
            continue
        assert name in locked, f"{name} is required by pyproject.toml but not locked"
        assert requirement.specifier.contains(locked[name], prereleases=True), (name, locked[name])
        checked += 1
    assert checked > 30


def test_supply_chain_layer_ships_the_versions_ci_tests() -> None:
    """L3: every package of the Lambda layer's lock is the dev lock's version (what CI installs and tests);
    its direct requirements are pyproject.toml's runtime dependencies, inside their ranges."""
    dev = _here(ROOT / lock.DEV)
    layer = {pin["name"]: pin for pin in _parse(ROOT / lock.LAYER)}
    assert {name: pin["version"] for name, pin in layer.items()} == {name: dev[name] for name in layer}
    dev_hashes = {pin["name"]: pin["hashes"] for pin in _parse(ROOT / lock.DEV) if _applies(pin)}
    for pin in layer.values():  # the same files: sam build downloads the layer's with the dev lock's hashes
        assert pin["hashes"] <= dev_hashes[pin["name"]], pin["name"]
    runtime = {
        canonicalize_name(Requirement(text).name): Requirement(text)
        for text in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    layer_in = lock._requirement_lines(ROOT / "requirements/layer.in")
    direct = [canonicalize_name(Requirement(line).name) for line in layer_in if not line.startswith("-")]
    assert {"pydantic", "mcp", "aws-lambda-powertools", "opensearch-py"} <= set(direct)
    for name in direct:
        assert name in runtime, f"layer.in names {name}, which pyproject.toml does not depend on"
        assert runtime[name].specifier.contains(layer[name]["version"]), (name, layer[name]["version"])
    for subset in (lock.SERVE, lock.BOOTSTRAP):
        pins = _here(ROOT / subset)
        assert pins == {name: dev[name] for name in pins}, subset


def _make_dry_run(tmp_path: Path, target: str) -> list[str]:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    done = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "pip install" in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_supply_chain_make_dev_and_serve_install_only_hash_checked_packages(tmp_path: Path) -> None:
    """L3: `make dev` (CI) and `make serve` install every package from a lock with --require-hashes; the
    project itself goes in without dependencies."""
    for target, locks in (("dev", {"requirements/dev.txt", "requirements/bootstrap.txt"}),
                          ("venv", {"requirements/serve.txt"})):  # fmt: skip
        installs = _make_dry_run(tmp_path, target)
        used = set()
        for line in installs:
            if "--require-hashes" in line:
                used.add(line.split(" -r ", 1)[1].split()[0])
            else:
                assert "--no-deps" in line and line.rstrip().endswith("-e ."), line
        assert locks <= used, (target, installs)


def test_supply_chain_layer_sbom_lists_every_locked_package_with_version_and_hashes(tmp_path: Path) -> None:
    """L3: `make sbom`'s CycloneDX SBOM of the layer names each locked package, its version, its PyPI purl
    and the sha256 of every locked file; built offline (no index is asked). The schema check is left to
    `make sbom` in CI (it takes most of the time)."""
    dead_proxy = "http://127.0.0.1:9"
    env = {**os.environ, "SBOM_DIR": str(tmp_path), "SBOM_VALIDATE": "0"}
    env |= {"HTTPS_PROXY": dead_proxy, "HTTP_PROXY": dead_proxy}
    command = ["bash", "scripts/sbom.sh", "layer"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    bom = json.loads((tmp_path / "layer.cdx.json").read_text())
    assert (
        bom["bomFormat"] == "CycloneDX" and bom["metadata"]["component"]["name"] == "agent-knowledge-service"
    )
    components = {canonicalize_name(c["name"]): c for c in bom["components"]}
    pins = _parse(ROOT / lock.LAYER)
    assert len(components) == len(pins)
    for pin in pins:
        component = components[pin["name"]]
        assert component["version"] == pin["version"]
        assert component["purl"].lower() == f"pkg:pypi/{pin['name']}@{pin['version']}".lower()
        references = component.get("externalReferences", [])
        listed = {h["content"] for ref in references for h in ref.get("hashes", []) if h["alg"] == "SHA-256"}
        assert listed == pin["hashes"], pin["name"]


# --- the pip-audit gate (scripts/audit.py); pip-audit's report is given, the verdict is tested --------------


def _fake_pip_audit(monkeypatch: pytest.MonkeyPatch, report: dict[str, Any] | None, stderr: str = "") -> None:
    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if report is not None:
            Path(command[command.index("--output") + 1]).write_text(json.dumps(report))
        return subprocess.CompletedProcess(command, 0 if report is not None else 1, "", stderr)

    monkeypatch.setattr(audit.subprocess, "run", run)


_VULNERABLE = {
    "dependencies": [
        {"name": "pydantic", "version": "2.13.5", "vulns": []},
        {"name": "Jinja2", "version": "3.1.2", "vulns": [
            {"id": "GHSA-h5c8-rqwp-cp95", "aliases": ["CVE-2024-22195"], "fix_versions": ["3.1.3"]}]},
    ]
}  # fmt: skip


def test_supply_chain_audit_fails_on_a_finding_naming_package_and_advisory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """L3: a vulnerable locked package fails the audit; the message names it, the advisory and the fix."""
    (tmp_path / "ignore.txt").write_text("# none accepted\n")
    monkeypatch.setattr(audit, "IGNORE_FILE", tmp_path / "ignore.txt")
    _fake_pip_audit(monkeypatch, _VULNERABLE)
    assert audit.main() == 1
    assert "Jinja2 3.1.2: GHSA-h5c8-rqwp-cp95 (fixed in 3.1.3)" in capsys.readouterr().err


def test_supply_chain_audit_accepts_only_a_finding_listed_with_its_package_and_a_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """L3: security/audit-ignore.txt accepts one advisory for one package, by any of its aliases; an entry
    without a reason is refused."""
    ignore = tmp_path / "ignore.txt"
    monkeypatch.setattr(audit, "IGNORE_FILE", ignore)
    _fake_pip_audit(monkeypatch, _VULNERABLE)
    ignore.write_text("CVE-2024-22195 pydantic  # the template engine is not reachable from requests\n")
    assert audit.main() == 1  # another package's advisory does not cover this one
    ignore.write_text("CVE-2024-22195 jinja2  # sam-cli's templates only; no user input reaches them\n")
    assert audit.main() == 0
    ignore.write_text("CVE-2024-22195 jinja2\n")
    with pytest.raises(ValueError, match="line 1"):
        audit.accepted_findings(ignore)
    assert audit.main() == 1


def test_supply_chain_audit_says_when_no_vulnerability_source_answered(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """L3: when no service answers for any package (or none can be reached) nothing was audited: the run
    fails with that message, or with KB_AUDIT_UNREACHABLE=warn passes printing it; a partial answer fails."""
    skipped = {"dependencies": [{"name": "pydantic", "skip_reason": "Dependency not found on PyPI"}]}
    _fake_pip_audit(monkeypatch, skipped)
    monkeypatch.delenv("KB_AUDIT_UNREACHABLE", raising=False)
    assert audit.main() == 2
    assert "NOTHING WAS AUDITED" in capsys.readouterr().err
    monkeypatch.setenv("KB_AUDIT_UNREACHABLE", "warn")
    assert audit.main() == 0
    assert "NOTHING WAS AUDITED" in capsys.readouterr().err
    _fake_pip_audit(monkeypatch, None, "requests.exceptions.ConnectionError: Max retries exceeded")
    assert audit.main() == 0
    assert "unreachable" in capsys.readouterr().err
    partial = {"dependencies": [*skipped["dependencies"], {"name": "mcp", "version": "2.3.0", "vulns": []}]}
    _fake_pip_audit(monkeypatch, partial)
    assert audit.main() == 1
    assert "NOT AUDITED" in capsys.readouterr().err
    _fake_pip_audit(monkeypatch, None, "KeyError: 'boom'")  # any other failure is no pass
    assert audit.main() == 1
    answers = iter([partial["dependencies"][1:], skipped["dependencies"]])  # one lock answered, one not

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        Path(command[command.index("--output") + 1]).write_text(json.dumps({"dependencies": next(answers)}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(audit.subprocess, "run", run)
    assert audit.main() == 1


def test_supply_chain_committed_audit_ignore_entries_each_have_a_reason() -> None:
    """L3: every accepted finding in security/audit-ignore.txt names its package and why."""
    for entry in audit.accepted_findings():
        assert entry.package and len(entry.reason) >= 10
