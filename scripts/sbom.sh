#!/usr/bin/env bash
# CycloneDX SBOMs (JSON, spec 1.6) in build/sbom/ (or $SBOM_DIR), not committed:
#   layer.cdx.json            the Lambda layer, from its lock: every package with its version, purl and the
#                             sha256 of each locked file; validated against the CycloneDX schema.
#   dev-environment.cdx.json  the installed .venv (tests, tools, CI), with each package's declared licence;
#                             not validated (the schema check takes ~35 s for its ~200 components).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${SBOM_DIR:-build/sbom}
mkdir -p "$OUT"
PYTHONWARNINGS=ignore::UserWarning $BIN/cyclonedx-py requirements --pyproject pyproject.toml --output-reproducible \
  -o "$OUT/layer.cdx.json" layers/knowledge_core/requirements.txt
PYTHONWARNINGS=ignore::UserWarning $BIN/cyclonedx-py environment --pyproject pyproject.toml --output-reproducible \
  --no-validate -o "$OUT/dev-environment.cdx.json" .venv
echo "SBOMs: $OUT/layer.cdx.json, $OUT/dev-environment.cdx.json"
