"""`kb serve` with a slow fake embedding model and no model files (`python -m tests.e2e.slow_model_serve
serve ...`): the demo's vectors take a while to fill, as with the real models on a small machine, so a test
can stop kb serve while it embeds. Worker processes rank by BM25 (they get no model)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from knowledge_core.bootstrap import Container
from knowledge_core.ports import Embedder, Vector

from kb_cli import local_env
from kb_cli.main import main

SECONDS_PER_PASSAGE = 0.05  # the demo (~300 passages) in ~15 s; a fill batch (32) in ~1.6 s


class SlowEmbedder(Embedder):
    models = ("slow-1",)

    def dimensions(self, model: str) -> int:
        return 4

    def embed_query(self, text: str) -> Vector | None:
        return Vector("slow-1", bytes([127, 0, 0, 0]))

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        time.sleep(SECONDS_PER_PASSAGE * len(texts))
        return [[Vector("slow-1", bytes([127, 0, 0, 0]))] for _ in texts]


_EMBEDDER = SlowEmbedder()
Container.embedder = property(lambda self: _EMBEDDER)  # type: ignore[assignment,method-assign]
local_env.LocalRanking.resolve = classmethod(  # type: ignore[method-assign,assignment]
    lambda cls, *args, **kwargs: cls(model_dir=None, ranking="hybrid (slow-1)")
)
local_env.LocalRanking.resolve_elsewhere = local_env.LocalRanking.resolve  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
