"""Sidecars of a directory being ingested (SPEC §7): which files are sidecars (never documents), which
document each belongs to, and reading one when its document is worked — like the document itself, opened
inside the directory without following links. A malformed sidecar is that document's typed error
(`invalid_metadata`); the rest of the job goes on."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..domain.ingestion import DirectoryFilePayload
from ..domain.metadata_sources import (
    MAX_SIDECAR_BYTES,
    MetadataError,
    is_sidecar,
    parse_sidecar,
    sidecar_name,
)
from ..extraction import ExtractionError
from ..local_files import read_regular_file


def split_sidecars(files: Iterable[Path]) -> tuple[list[Path], set[Path]]:
    """The files that are documents, and the sidecars among the rest (a sidecar without its file is
    nobody's: ignored, never a failure)."""
    documents: list[Path] = []
    sidecars: set[Path] = set()
    for path in files:
        if is_sidecar(path.name):
            sidecars.add(path)
        else:
            documents.append(path)
    return documents, sidecars


def sidecar_of(path: Path, sidecars: set[Path]) -> Path | None:
    candidate = path.with_name(sidecar_name(path.name))
    return candidate if candidate in sidecars else None


def directory_sidecar(payload: DirectoryFilePayload) -> dict[str, Any] | None:
    """The attributes of a directory file's sidecar, read now (a sidecar changed since the last ingest
    changes the document's metadata, so the document is re-written). None when it has none, or its
    sidecar was removed since the scan; ExtractionError("invalid_metadata") when it cannot be read as
    one (a link, too large, not Bedrock's shape)."""
    if payload.sidecar is None or payload.root is None:
        return None
    try:
        data = read_regular_file(payload.root, payload.sidecar, MAX_SIDECAR_BYTES)
    except ExtractionError as exc:
        if exc.code == "not_found":
            return None
        raise ExtractionError("invalid_metadata") from None
    try:
        return parse_sidecar(data)
    except MetadataError:
        raise ExtractionError("invalid_metadata") from None
