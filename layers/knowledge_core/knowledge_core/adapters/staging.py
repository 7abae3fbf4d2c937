"""A directory written whole or not at all (a fetched model, the built lexicon): filled beside its target,
then renamed into place."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged(target: Path) -> Iterator[Path]:
    """A directory beside `target` to fill, renamed into it when the block ends without an error: complete
    or absent, never half-written."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    yield partial
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
