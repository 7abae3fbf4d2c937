"""pip-audit of every hash-locked requirements file against PyPI's vulnerability data, or OSV's when PyPI
answers for none of the packages (`make audit`).

Nothing is installed: the locks pin every package with its hashes (pip-audit --disable-pip). A finding fails
the run unless security/audit-ignore.txt accepts its advisory for that package with a reason. A package the
vulnerability service did not answer for was not audited, and that fails the run too; when it answered for
none at all (no service reachable) the run fails with a message saying so, or, with KB_AUDIT_UNREACHABLE=warn,
prints that notice and passes (CI on a machine without that service: docs/security-supply-chain.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# serve.txt and bootstrap.txt pin a subset of dev.txt at the same versions (scripts/lock.py compiles them
# against it), so these two cover every locked package.
LOCKS = ("layers/knowledge_core/requirements.txt", "requirements/dev.txt")
IGNORE_FILE = ROOT / "security" / "audit-ignore.txt"
_ENTRY = re.compile(
    r"^(?P<id>(?:PYSEC|GHSA|CVE|OSV)-[\w-]+)\s+(?P<package>[A-Za-z0-9._-]+)\s+#\s*(?P<reason>\S.*)$"
)


_UNREACHABLE = re.compile(
    r"ConnectionError|ProxyError|ConnectTimeout|ReadTimeout|Max retries exceeded|NameResolution"
)


@dataclass(frozen=True)
class Accepted:
    advisory: str
    package: str
    reason: str


def accepted_findings(path: Path | None = None) -> list[Accepted]:
    """The entries of audit-ignore.txt; ValueError naming the line for one without a package or a reason."""
    path = path or IGNORE_FILE
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _ENTRY.match(line.strip())
        if match is None or len(match["reason"].strip()) < 10:
            raise ValueError(f"{path.name} line {number}: expected '<advisory id> <package>  # <reason>'")
        entries.append(Accepted(match["id"], match["package"].lower(), match["reason"].strip()))
    return entries


@dataclass
class Result:
    lock: str
    audited: int
    skipped: list[str]
    findings: list[str]


SERVICES = ("pypi", "osv")


def audit(lock: str, accepted: list[Accepted], service: str = "pypi") -> Result:
    """One pip-audit run over `lock` against `service`; findings accepted for their package are left out."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "audit.json"
        command = [
            sys.executable, "-m", "pip_audit", "-r", lock, "--require-hashes", "--disable-pip", "-s", service,
            "--progress-spinner", "off", "--format", "json", "--output", str(report),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if not report.exists():
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            if _UNREACHABLE.search(done.stderr):
                return Result(
                    lock, 0, [f"(every package): vulnerability service unreachable: {last[:200]}"], []
                )
            raise RuntimeError(f"pip-audit did not finish on {lock} (exit {done.returncode}): {last[:300]}")
        dependencies = json.loads(report.read_text())["dependencies"]
    skipped = [f"{d['name']}: {d['skip_reason']}" for d in dependencies if d.get("skip_reason")]
    findings = []
    for dependency in dependencies:
        for vuln in dependency.get("vulns", []):
            ids = {vuln["id"], *vuln.get("aliases", [])}
            name = dependency["name"].lower()
            if any(a.package == name and a.advisory in ids for a in accepted):
                continue
            fixes = ", ".join(vuln.get("fix_versions", [])) or "none yet"
            findings.append(f"{dependency['name']} {dependency['version']}: {vuln['id']} (fixed in {fixes})")
    return Result(lock, len(dependencies) - len(skipped), skipped, findings)


def main() -> int:
    try:
        accepted = accepted_findings()
        unanswered: list[str] = []  # per service, why it answered for nothing
        for service in SERVICES:
            results = [audit(lock, accepted, service) for lock in LOCKS]
            if any(result.audited for result in results):
                break
            first = next((skip for result in results for skip in result.skipped), "no packages")
            unanswered.append(f"{service}: {first}")
    except (RuntimeError, ValueError) as error:
        print(f"pip-audit: {error}", file=sys.stderr)
        return 1
    failed = False
    answered = any(result.audited for result in results)
    for result in results:
        for finding in result.findings:
            print(f"VULNERABLE {result.lock}: {finding}", file=sys.stderr)
            failed = True
        if result.skipped and answered:  # a service that answers for some packages must answer for all
            for skip in result.skipped:
                print(f"NOT AUDITED {result.lock}: {skip}", file=sys.stderr)
            failed = True
    if not answered:
        print(
            "pip-audit: no vulnerability source reachable: neither PyPI nor OSV answered for any package of "
            f"{', '.join(LOCKS)}, so NOTHING WAS AUDITED (docs/security-supply-chain.md). "
            + "; ".join(unanswered),
            file=sys.stderr,
        )
        if os.environ.get("KB_AUDIT_UNREACHABLE") != "warn":
            return 2
    elif not failed:
        print(
            f"pip-audit ({service}): no known vulnerabilities in "
            + ", ".join(f"{r.lock} ({r.audited} packages)" for r in results)
            + (f"; {len(accepted)} accepted in security/audit-ignore.txt" if accepted else "")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
