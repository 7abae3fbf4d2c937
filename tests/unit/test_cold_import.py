"""What a function's cold import builds (bench/cold_import.py measures its time against `import boto3`): the
core's pydantic models build their validators on first use, and the filter's ~80 JSON Schema models only
when a JSON Schema is asked for, so importing a function does neither."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kb_cli.template import functions

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "knowledge_core"

# Imports every function module of template.yaml in one fresh interpreter, as Lambda would (one each), then
# reports the core's pydantic models and which of them have built their validator.
_PROBE = """
import importlib.util, json, sys
sys.path.insert(0, {layer!r})
for i, path in enumerate({paths!r}):
    spec = importlib.util.spec_from_file_location(f"function_{{i}}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
import knowledge_core
from pydantic import BaseModel
def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)
ours = {{c for c in subclasses(BaseModel) if c.__module__.startswith("knowledge_core")}}
print(json.dumps({{
    "layer": knowledge_core.__file__,
    "modules": sorted(m for m in sys.modules if m.startswith("knowledge_core")),
    "models": sorted(c.__qualname__ for c in ours),
    "built": sorted(f"{{c.__module__}}.{{c.__qualname__}}" for c in ours if c.__pydantic_complete__),
}}))
"""

# Instances made at import: request bounds (LIMITS) and the capabilities' defaults, which the OpenAPI
# document shows.
BUILT_AT_IMPORT = {
    "knowledge_core.domain.wire.Limits",
    "knowledge_core.domain.wire.Extensions",
    "knowledge_core.domain.wire.FilterExtension",
    "knowledge_core.domain.wire.ReadExtension",
    "knowledge_core.domain.wire.RankingExtension",
}


def _function_paths() -> dict[str, str]:
    return {
        name: str(fn.code_dir / (fn.handler.rpartition(".")[0].replace(".", "/") + ".py"))
        for name, fn in functions().items()
    }


def _import(paths: list[str]) -> dict[str, object]:
    env = {"POWERTOOLS_TRACE_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"}
    code = _PROBE.format(layer=str(LAYER), paths=paths)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(report["layer"]).startswith(str(LAYER))  # this tree's core, not an installed copy
    return report


def _import_every_function() -> dict[str, object]:
    return _import(sorted(_function_paths().values()))


def test_importing_every_function_builds_no_filter_schema_model_f_filter():
    """F-FILTER: a filter is validated by parse_filter; the models that document it (Filter, FilterDepth1,
    EqualsFilter, …) exist only once a JSON Schema is generated, never at a function's import."""
    report = _import_every_function()
    models = set(report["models"])  # type: ignore[arg-type]
    assert {"SearchRequest", "AgentDefinition", "SourceFilter"} <= models
    assert not {m for m in models if "Filter" in m and m not in {"SourceFilter", "FilterExtension"}}


def test_importing_every_function_builds_only_the_models_of_its_constants():
    """The core's models build their validators on first use: importing every function builds only those
    a module-level instance needs."""
    report = _import_every_function()
    assert len(report["models"]) > 50  # type: ignore[arg-type]
    assert set(report["built"]) <= BUILT_AT_IMPORT  # type: ignore[arg-type]


def test_deferred_models_validate_and_document_filters_as_before_f_filter():
    """F-FILTER: built on first use, a request model still refuses a bad filter at its exact path, and its
    JSON Schema still documents the filter through the unrolled Filter models."""
    import pytest
    from knowledge_core.domain.errors import InvalidRequest
    from knowledge_core.domain.models import AgentDefinition
    from knowledge_core.domain.wire import SearchRequest, parse_request

    bad = {"query": "q", "filter": {"andAll": [{"equals": {"key": "a", "value": 1}}, {"lessThan": {}}]}}
    with pytest.raises(InvalidRequest) as refused:
        parse_request(SearchRequest, json.dumps(bad))
    assert refused.value.field == "filter.andAll[1].lessThan.key"
    search_defs = SearchRequest.model_json_schema()["$defs"]
    assert {"Filter", "FilterDepth1", "EqualsFilter", "AndAllFilterDepth3"} <= set(search_defs)
    agent_defs = AgentDefinition.model_json_schema(by_alias=True)["$defs"]
    assert {"ContextFilter", "ContextEqualsCondition"} <= set(agent_defs)


def test_the_admin_function_imports_no_agent_tool_or_turn_wire_models_r_admin():
    """R-ADMIN: the admin function's cold import holds its own wire models, not the agent tool's or the
    turns' (the ledger's invocation id pattern lives with the budget rules)."""
    admin = next(path for path in _function_paths().values() if Path(path).parent.name == "admin")
    modules = set(_import([admin])["modules"])  # type: ignore[arg-type]
    assert "knowledge_core.domain.admin_wire" in modules
    assert not modules & {"knowledge_core.domain.tool_wire", "knowledge_core.domain.turn_wire"}
