#!/usr/bin/env bash
# CycloneDX SBOMs (JSON, spec 1.6) in build/sbom/ (or $SBOM_DIR), not committed:
#   layer.cdx.json            the Lambda layer, from its lock: every package with its version, purl and the
#                             sha256 of each locked file; validated against the CycloneDX schema.
#   dev-environment.cdx.json  the installed .venv (tests, tools, CI), with each package's declared licence;
#                             not validated (the schema check takes ~35 s for its ~200 components).
# Arguments: which of the two (layer, dev); both by default. SBOM_VALIDATE=0 skips the layer's schema check.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${SBOM_DIR:-build/sbom}
PARTS=${*:-layer dev}
mkdir -p "$OUT"
# (The warning silenced: the root component lists no dependencies of its own.)
export PYTHONWARNINGS=ignore::UserWarning
for part in $PARTS; do
  case $part in
    layer) $BIN/cyclonedx-py requirements --pyproject pyproject.toml --output-reproducible \
             "$([ "${SBOM_VALIDATE:-1}" = 0 ] && echo --no-validate || echo --validate)" \
             -o "$OUT/layer.cdx.json" layers/knowledge_core/requirements.txt ;;
    dev) $BIN/cyclonedx-py environment --pyproject pyproject.toml --output-reproducible --no-validate \
           -o "$OUT/dev-environment.cdx.json" .venv ;;
    *) echo "sbom.sh: unknown part '$part' (layer, dev)" >&2; exit 2 ;;
  esac
  echo "SBOM: $OUT/$([ "$part" = layer ] && echo layer || echo dev-environment).cdx.json"
done
