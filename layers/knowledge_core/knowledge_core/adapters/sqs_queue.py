"""The ingestion worker's queue on AWS: one SQS message per job to work on (`{"job_id": …}`)."""

from __future__ import annotations

import json
from typing import Any

from ..domain.errors import StateUnavailable
from ..ports import JobQueue


class SqsJobQueue(JobQueue):
    def __init__(self, queue_url: str, *, region: str, client: Any = None) -> None:
        self._url = queue_url
        self._region = region
        self._client_obj = client

    @property
    def _client(self) -> Any:
        if self._client_obj is None:
            import boto3  # lazy: only the functions that enqueue pay for it

            self._client_obj = boto3.client("sqs", region_name=self._region)
        return self._client_obj

    def enqueue(self, job_id: str, delay_s: int = 0) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.send_message(
                QueueUrl=self._url,
                MessageBody=json.dumps({"job_id": job_id}),
                DelaySeconds=max(0, min(900, delay_s)),
            )
        except (BotoCoreError, ClientError) as exc:
            raise StateUnavailable() from exc
