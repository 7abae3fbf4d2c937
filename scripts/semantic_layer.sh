#!/usr/bin/env bash
# Builds the optional Lambda layer of query translation: the compiled zh<->en lexicon in
# kb-model/zh-en-lexicon/ (the template's KB_LEXICON_DIR; 1.8 MB). The embedding models are not in it: the
# embed function runs them (its layer EmbedRuntimeLayer holds the runtime; the models are copied from S3,
# template parameter EmbeddingModelsBucket; docs/ranking.md, Lambda).
# Output: build/semantic-layer.zip. Publish it and pass its ARN as EmbeddingModelLayerArn.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=build/semantic-layer
rm -rf "$OUT" "$OUT.zip"
LEXICON=$($BIN/kb models fetch --lexicon)
mkdir -p "$OUT/kb-model"
cp -r "$LEXICON" "$OUT/kb-model/zh-en-lexicon"
ROOT=$PWD
(cd "$OUT" && "$ROOT/$BIN/python" -m zipfile -c ../semantic-layer.zip kb-model)
du -sh "$OUT" "$OUT.zip"
echo "publish: aws lambda publish-layer-version --layer-name agent-knowledge-lexicon \\"
echo "  --zip-file fileb://$OUT.zip --compatible-runtimes python3.11 --compatible-architectures x86_64"
