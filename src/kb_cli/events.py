"""`events/` are fixtures: the same files serve `sam local invoke`, `kb invoke` and the tests."""

from __future__ import annotations

import json
from pathlib import Path

from .template import ROOT

EVENTS = ROOT / "events"


def load_event(name: str | Path) -> dict:
    """`load_event("search/search.json")` or a path to any event file."""
    path = Path(name)
    if not path.is_absolute() and not path.exists():
        path = EVENTS / path
    return json.loads(path.read_text(encoding="utf-8"))
