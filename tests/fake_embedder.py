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
