"""Reading template.yaml: functions (logical id, code directory) and their HTTP API routes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"


class _CfnLoader(yaml.SafeLoader):
    """SafeLoader that keeps CloudFormation short-form intrinsics (!Ref, !Sub, …) as plain values."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {suffix: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def load_template(path: Path = TEMPLATE) -> dict:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_CfnLoader)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    function: str
    iam: bool
    pattern: re.Pattern = field(compare=False)
    literals: int = 0
    authorizer: bool = True

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method not in ("*", method):
            return None
        m = self.pattern.fullmatch(path)
        return m.groupdict() if m else None


@dataclass(frozen=True)
class Function:
    logical_id: str
    code_dir: Path
    handler: str
    timeout_s: float = 30.0

    @property
    def short_name(self) -> str:
        return self.code_dir.name


def functions(template: dict | None = None) -> dict[str, Function]:
    template = template or load_template()
    defaults = template.get("Globals", {}).get("Function", {})
    out = {}
    for logical_id, res in template["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function":
            props = res["Properties"]
            timeout = props.get("Timeout", defaults.get("Timeout", 30))
            out[logical_id] = Function(
                logical_id,
                ROOT / props["CodeUri"],
                props.get("Handler", defaults.get("Handler", "app.lambda_handler")),
                float(timeout) if isinstance(timeout, int | float) else 30.0,
            )
    return out


def routes(template: dict | None = None) -> list[Route]:
    """HTTP API routes, most specific (most literal segments) first, as API Gateway chooses."""
    template = template or load_template()
    out = []
    for logical_id, res in template["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        for event in (res["Properties"].get("Events") or {}).values():
            if event["Type"] != "HttpApi":
                continue
            props = event["Properties"]
            path = props["Path"]
            if path == "$default":  # API Gateway's catch-all route: matched only when nothing else is
                regex, literals = ".*", -1
            else:
                regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path))
                literals = sum(1 for seg in path.split("/") if seg and not seg.startswith("{"))
            authorizer = (props.get("Auth") or {}).get("Authorizer")
            iam = authorizer == "AWS_IAM"
            method = props["Method"].upper()
            out.append(
                Route(
                    "*" if method == "ANY" else method,
                    path,
                    logical_id,
                    iam,
                    re.compile(regex),
                    literals,
                    authorizer not in ("NONE", "AWS_IAM"),
                )
            )
    return sorted(out, key=lambda r: -r.literals)


def authorizer_function(template: dict | None = None) -> str | None:
    template = template or load_template()
    for res in template["Resources"].values():
        if res["Type"] == "AWS::Serverless::HttpApi":
            auth = res["Properties"].get("Auth", {})
            default = auth.get("DefaultAuthorizer")
            arn = auth.get("Authorizers", {}).get(default, {}).get("FunctionArn", {})
            if isinstance(arn, dict) and "GetAtt" in arn:
                return str(arn["GetAtt"]).split(".")[0]
    return None
