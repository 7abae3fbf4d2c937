"""A fixed embedder of one 4-dimension model (`m-1.5`) for adapter tests that need k-NN fields but no
model: every query and passage gets the same vector."""

from __future__ import annotations

from typing import Any

from knowledge_core.ports import Embedder, Vector


class OneModelEmbedder(Embedder):
    models = ("m-1.5",)

    def dimensions(self, model: str) -> int:
        return 4

    def embed_query(self, text: str) -> Vector | None:
        return Vector("m-1.5", bytes([127, 0, 0, 0]))

    def embed_passages(self, texts: Any, models: Any = None) -> list[list[Vector]]:
        return [[Vector("m-1.5", bytes([0, 255, 1, 0]))] for _ in texts]


TOPICS = (("battery", "电池"), ("garden", "花园"), ("river", "河流"))


def _axis(text: str) -> int:
    """The topic of a text: the first of TOPICS it names (in either language), else the last axis."""
    low = text.lower()
    return next((i for i, words in enumerate(TOPICS) if any(w in low for w in words)), len(TOPICS))


def topic_vector(model: str, axis: int, lean: int = 0) -> Vector:
    """A unit int8 vector along `axis` of 4, leaning `lean` (of 127) towards the last axis."""
    values = [0, 0, 0, 0]
    values[axis] = 127 - lean
    values[3 if axis != 3 else 0] += lean
    return Vector(model, bytes(v & 0xFF for v in values))


class MixedEmbedder(Embedder):
    """The mixed design in four dimensions, no model file: one model per script (`lat`, `cjk`) and a
    multilingual model stored per script (`multi.zh`, `multi.en`). A text's vector points at its topic
    (TOPICS, in either language); the multilingual model's vector of a passage leans a little off it when
    the passage is in English (the model's own-language bias, seen from a Chinese question)."""

    models = ("lat", "cjk", "multi.zh", "multi.en")

    def dimensions(self, model: str) -> int:
        return 4

    @staticmethod
    def _cjk(text: str) -> bool:
        return any("\u4e00" <= ch <= "\u9fff" for ch in text)

    def models_for(self, text: str) -> tuple[str, ...]:
        return ("cjk", "multi.zh") if self._cjk(text) else ("lat", "multi.en")

    def embed_query(self, text: str) -> Vector | None:
        return topic_vector("cjk" if self._cjk(text) else "lat", _axis(text))

    def embed_across(self, text: str) -> tuple[Vector, Vector] | None:
        data = topic_vector("multi", _axis(text)).data
        own, other = ("multi.zh", "multi.en") if self._cjk(text) else ("multi.en", "multi.zh")
        return Vector(other, data), Vector(own, data)

    def embed_passages(self, texts: Any, models: Any = None) -> list[list[Vector]]:
        out = []
        for text in texts:
            mine = [m for m in self.models_for(text) if models is None or m in models]
            lean = 0 if self._cjk(text) else 30
            out.append([topic_vector(m, _axis(text), lean if m.startswith("multi") else 0) for m in mine])
        return out
