"""The ObjectStore port on the S3 API (boto3). Where S3 is and who we are come from boto3's own chain —
`AWS_ENDPOINT_URL_S3` (a local S3-API server), the credential chain (the Lambda role on AWS) — so there is
no setting of ours to get wrong. Every failure leaves as a typed ObjectStoreError: the store's messages
can name keys and buckets the caller did not ask about, so none of them is passed on."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..domain.s3_source import ObjectStoreError, ObjectStoreErrorCode, StoredObject
from ..ports import ObjectStore

T = TypeVar("T")

_PAGE = 1000  # ListObjectsV2's largest page
_READ_CHUNK = 1024 * 1024
# S3 error codes -> ours. Anything unknown is `unavailable` (the job waits and tries again).
_CODES: dict[str, ObjectStoreErrorCode] = {
    "NoSuchBucket": "bucket_not_found",
    "NoSuchKey": "not_found",
    "404": "not_found",
    "NotFound": "not_found",
    "AccessDenied": "access_denied",
    "403": "access_denied",
    "AllAccessDisabled": "access_denied",
    "InvalidAccessKeyId": "no_credentials",
    "SignatureDoesNotMatch": "no_credentials",
    "ExpiredToken": "no_credentials",
    "InvalidToken": "no_credentials",
}


class S3ObjectStore(ObjectStore):
    def __init__(self, region: str | None = None, client: Any = None) -> None:
        self._region = region
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """Made on first use (boto3 costs a cold start its import); shared by the worker's threads."""
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                config = Config(
                    connect_timeout=5,
                    read_timeout=30,
                    retries={"max_attempts": 4, "mode": "standard"},
                    max_pool_connections=16,
                )
                # A session of its own: boto3's default one is shared with (and configured by) other code.
                session = boto3.session.Session()
                self._client = session.client("s3", region_name=self._region, config=config)
            return self._client

    def list_objects(self, bucket: str, prefix: str, limit: int) -> list[StoredObject]:
        found: list[StoredObject] = []
        token: str | None = None
        while len(found) <= limit:
            params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": _PAGE}
            if token:
                params["ContinuationToken"] = token
            page: dict[str, Any] = _call(functools.partial(self.client.list_objects_v2, **params))
            found += [
                StoredObject(o["Key"], str(o.get("ETag", "")).strip('"'), int(o.get("Size", 0)))
                for o in page.get("Contents", [])
            ]
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if not token:
                break
        return found[: limit + 1]

    def head_object(self, bucket: str, key: str) -> StoredObject | None:
        try:
            head = _call(lambda: self.client.head_object(Bucket=bucket, Key=key))
        except ObjectStoreError as exc:
            if exc.code == "not_found":
                return None
            raise
        return StoredObject(key, str(head.get("ETag", "")).strip('"'), int(head.get("ContentLength", 0)))

    def get_object(self, bucket: str, key: str, max_bytes: int) -> tuple[bytes, str]:
        def read() -> tuple[bytes, str]:
            response = self.client.get_object(Bucket=bucket, Key=key)
            body = response["Body"]
            try:
                chunks: list[bytes] = []
                size = 0
                while chunk := body.read(_READ_CHUNK):
                    size += len(chunk)
                    if size > max_bytes:  # the listing said otherwise, or the object grew: stop here
                        raise ObjectStoreError("too_large")
                    chunks.append(chunk)
                return b"".join(chunks), str(response.get("ETag", "")).strip('"')
            finally:
                body.close()

        return _call(read)


def _call(fn: Callable[[], T]) -> T:
    """`fn()` with boto3's failures as ObjectStoreError."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

    try:
        return fn()
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        raise ObjectStoreError(_CODES.get(code, "unavailable")) from None
    except (NoCredentialsError, PartialCredentialsError):
        raise ObjectStoreError("no_credentials") from None
    except BotoCoreError:
        raise ObjectStoreError("unavailable") from None
