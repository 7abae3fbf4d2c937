"""BERT WordPiece tokenisation in plain Python, read from a Hugging Face `tokenizer.json`.

Equivalent to the `tokenizers` pipeline these models ship with (BertNormalizer, BertPreTokenizer,
WordPiece, `[CLS] $A [SEP]`), so the embedding models need no tokenizer library in the Lambda layer.
`tests/unit/test_embedding.py` pins the ids against ones the reference implementation produced.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path

from ..domain.cache import BoundedCache

# The CJK Unified Ideograph blocks BERT isolates as one-character words.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


class WordPieceTokenizer:
    """Token ids for one text: normalised, split into words and punctuation, then WordPiece."""

    def __init__(
        self,
        vocab: dict[str, int],
        *,
        lowercase: bool,
        strip_accents: bool,
        unk_token: str = "[UNK]",
        prefix: str = "##",
        max_word_chars: int = 100,
    ) -> None:
        self._vocab = vocab
        self._lowercase = lowercase
        self._strip_accents = strip_accents
        self._prefix = prefix
        self._max_word_chars = max_word_chars
        self.unk_id = vocab[unk_token]
        self.cls_id = vocab["[CLS]"]
        self.sep_id = vocab["[SEP]"]
        self.pad_id = vocab.get("[PAD]", 0)
        # Bounded by bytes (S5); a word past max_word_chars is [UNK] and not worth a slot.
        self._word_cache = BoundedCache[str, tuple[int, ...]](
            8 * 1024 * 1024, max_entry_bytes=sys.getsizeof("x" * max_word_chars) + 2048
        )
        self._word_ids = self._word_cache.memo(self._word_pieces)

    @classmethod
    def from_file(cls, path: str | Path) -> WordPieceTokenizer:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
        model, normalizer = spec["model"], spec.get("normalizer") or {}
        if model.get("type") != "WordPiece" or normalizer.get("type") not in (None, "BertNormalizer"):
            raise ValueError(f"{path}: not a BERT WordPiece tokenizer")
        lowercase = bool(normalizer.get("lowercase", True))
        strip = normalizer.get("strip_accents")
        return cls(
            model["vocab"],
            lowercase=lowercase,
            strip_accents=lowercase if strip is None else bool(strip),
            unk_token=model.get("unk_token", "[UNK]"),
            prefix=model.get("continuing_subword_prefix", "##"),
            max_word_chars=int(model.get("max_input_chars_per_word", 100)),
        )

    def normalize(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or _is_control(ch):
                continue
            if _is_whitespace(ch):
                out.append(" ")
            elif _is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = "".join(out)
        if self._strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text.lower() if self._lowercase else text

    @staticmethod
    def words(text: str) -> list[str]:
        """Whitespace-separated words with every punctuation character its own word."""
        words: list[str] = []
        for chunk in text.split():
            start = 0
            for i, ch in enumerate(chunk):
                if _is_punctuation(ch):
                    if start < i:
                        words.append(chunk[start:i])
                    words.append(ch)
                    start = i + 1
            if start < len(chunk):
                words.append(chunk[start:])
        return words

    def _word_pieces(self, word: str) -> tuple[int, ...]:
        if len(word) > self._max_word_chars:
            return (self.unk_id,)
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self._prefix + word[start:end]
                if piece in self._vocab:
                    ids.append(self._vocab[piece])
                    break
                end -= 1
            else:
                return (self.unk_id,)
            start = end
        return tuple(ids)

    def encode(self, text: str, max_length: int) -> list[int]:
        """`[CLS]` + WordPiece ids + `[SEP]`, truncated to `max_length` ids in all."""
        ids = [self.cls_id]
        limit = max_length - 1
        for word in self.words(self.normalize(text)):
            ids.extend(self._word_ids(word))
            if len(ids) >= limit:
                del ids[limit:]
                break
        ids.append(self.sep_id)
        return ids
