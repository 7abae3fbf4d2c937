# The README's two commands are `make serve` and `make test`; everything else is a convenience.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STATE ?= .kb-state
PORT ?= 3000

.PHONY: venv dev serve test unit lint docs docs-reference sam openapi fuzz semantic-layer bench services-start \
	services-stop clean lock lock-check sbom audit supply-chain

# pip, setuptools and wheel current (the venv's own setuptools 65 is in CVE-2024-6345's and CVE-2025-47273's range),
# from their hash-locked versions.
$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r requirements/bootstrap.txt

# Installed again only when pyproject.toml or its lock changed (the stamp is newer otherwise): the packages of
# requirements/serve.txt, each checked against its locked sha256, then the project (editable, no dependencies);
# setuptools' notice box about editable installs is silenced.
$(VENV)/.installed-semantic: pyproject.toml $(wildcard requirements/serve.txt) | $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r requirements/serve.txt
	PYTHONWARNINGS=ignore $(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@touch $@

venv: $(VENV)/.installed-semantic

# Every package from requirements/dev.txt, each checked against its locked sha256; then the project itself
# (editable, no dependencies, built by the locked setuptools).
dev: $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r requirements/bootstrap.txt
	$(BIN)/pip install -q --require-hashes -r requirements/dev.txt
	PYTHONWARNINGS=ignore $(BIN)/pip install -q --no-deps --no-build-isolation -e .

# Hybrid ranking by default: the models are fetched once into the per-user cache (Maven Central) when Java and
# Maven are here; otherwise one line says so and kb serve ranks by BM25. The query translation lexicon is
# compiled there once from installed packages (no Java needed).
serve: venv
	@$(BIN)/kb models fetch --lexicon >/dev/null || echo "make serve: no query translation lexicon (above)"
	@if [ -n "$$KB_EMBEDDING_MODEL_DIR" ]; then :; \
	elif command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then \
	  $(BIN)/kb models fetch >/dev/null || echo "make serve: kb models fetch failed (above); ranking by BM25"; \
	else echo "make serve: no Java/Maven here, so no embedding models: ranking by BM25 (install both for hybrid)"; fi
	$(BIN)/kb serve --state $(STATE) --port $(PORT)

test: dev
	bash scripts/test.sh

unit: dev
	$(BIN)/python -m pytest -q tests/unit

lint: dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy layers/knowledge_core/knowledge_core src/kb_cli src/knowledge_client
	$(BIN)/mypy --strict --explicit-package-bases layers/knowledge_core/knowledge_core functions
	$(BIN)/sam validate --lint
	$(BIN)/cfn-lint --append-rules cfn_lint_serverless.rules -- template.yaml

# The documentation site (mkdocs.yml, docs/) into build/site/; strict: a warning fails it.
docs: dev
	$(BIN)/mkdocs build --strict

# docs/reference/ from openapi.json and Settings (tests/unit/test_docs_reference.py fails when stale).
docs-reference: dev
	PYTHONPATH=layers/knowledge_core $(BIN)/python scripts/docs_reference.py

sam: dev
	SAM_CLI_TELEMETRY=0 $(BIN)/sam validate --lint
	$(BIN)/cfn-lint --append-rules cfn_lint_serverless.rules -- template.yaml
	SAM_CLI_TELEMETRY=0 PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/sam build --build-dir .aws-sam/build

# openapi.json from the wire models (tests/unit/test_openapi.py fails when it is stale).
openapi: dev
	$(BIN)/python -m knowledge_core.openapi > openapi.json

# schemathesis against a fresh kb serve on loopback (also the last step of scripts/test.sh).
fuzz: dev
	bash scripts/schemathesis.sh

# The optional hybrid ranking layer for the template's EmbeddingModelLayerArn (build/semantic-layer.zip).
semantic-layer: dev
	bash scripts/semantic_layer.sh

bench: dev
	$(BIN)/python bench/cold_import.py
	$(BIN)/python bench/api_latency.py
	$(BIN)/python bench/hybrid_latency.py
	$(BIN)/python bench/embed_throughput.py
	$(BIN)/python bench/scale_sim.py
	$(BIN)/python bench/state_bench.py
	$(BIN)/python bench/ingest_bench.py --no-hybrid

services-start: dev
	$(BIN)/kb services start --state $(STATE)

services-stop:
	$(BIN)/kb services stop --state $(STATE)

# The hash-locked requirements (requirements/*.txt, the layer's requirements.txt) from pyproject.toml and
# requirements/*.in; lock-check compiles them again and fails when a committed lock differs.
# (uv comes with `make dev`; `make lock UPGRADE="pkg1 pkg2"` takes those packages' newest versions.)
lock:
	$(BIN)/python scripts/lock.py $(foreach p,$(UPGRADE),--upgrade $(p))

lock-check: dev
	$(BIN)/python scripts/lock.py --check

# CycloneDX SBOMs of the Lambda layer (from its lock, with hashes) and of the dev environment, in build/sbom/.
sbom: dev
	bash scripts/sbom.sh

# pip-audit of every lock against PyPI's vulnerability data (security/audit-ignore.txt: accepted findings).
audit: dev
	$(BIN)/python scripts/audit.py

supply-chain: lock-check sbom audit

clean:
	rm -rf .aws-sam .pytest_cache .ruff_cache bench/results
