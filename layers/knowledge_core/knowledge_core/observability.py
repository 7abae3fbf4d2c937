"""One Logger, Tracer and Metrics shared by every function."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "agent-knowledge"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace="AgentKnowledge", service=SERVICE)
