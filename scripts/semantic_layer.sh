#!/usr/bin/env bash
# Builds the optional Lambda layer of hybrid ranking: onnxruntime, numpy and tokenizers for python3.11 /
# x86_64 (manylinux wheels from PyPI) in python/, the default embedding models (English and Chinese) in
# kb-model/<model>/ (the template's KB_EMBEDDING_MODEL_DIR is /opt/kb-model: every model in it is used), and
# the compiled zh<->en query translation lexicon in kb-model/zh-en-lexicon/ (KB_LEXICON_DIR; 1.8 MB).
# Output: build/semantic-layer.zip; the script prints its sizes (docs/ranking.md has them and
# the Lambda limits). Publish it through S3 and pass its ARN as EmbeddingModelLayerArn.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=build/semantic-layer
rm -rf "$OUT" "$OUT.zip"
mkdir -p "$OUT/python"
# Inference needs none of onnxruntime's other requirements (sympy, protobuf, ... serve its tools).
$BIN/pip download -q --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_26_x86_64 --python-version 3.11 --implementation cp --no-deps -d "$OUT/wheels" \
  "onnxruntime>=1.16" "numpy>=1.26,<2" "tokenizers>=0.20" "sentencepiece>=0.2" packaging flatbuffers \
  coloredlogs humanfriendly
# The mixed design's multilingual model (an ONNX graph of 4-bit weights, 83 MB unpacked) does not fit beside
# the core layer in Lambda's 250 MB with the bge pair: KB_LAYER_MULTILINGUAL=1 adds it for a container image
# or a function without the core layer's size; by default the layer holds the two bge models, which rank as
# before the mixed design.
MULTI=${KB_LAYER_MULTILINGUAL:-0}
# (tokenizers' own requirement, huggingface_hub, serves downloads from a hub: never made here, left out.)
for w in "$OUT"/wheels/*.whl; do $BIN/python -m zipfile -e "$w" "$OUT/python"; done
rm -rf "$OUT/wheels"
MODELS=$($BIN/kb models fetch)
mkdir -p "$OUT/kb-model"
for m in "$MODELS"/*/; do
  if [ "$MULTI" != 1 ] && grep -q '"across": true' "$m/model.json" 2>/dev/null; then continue; fi
  if [ -f "$m/model.json" ] || [ -f "$m/lexicon.json" ]; then cp -r "$m" "$OUT/kb-model/"; fi
done
ROOT=$PWD
(cd "$OUT" && "$ROOT/$BIN/python" -m zipfile -c ../semantic-layer.zip python kb-model)
du -sh "$OUT" "$OUT.zip"
echo "publish: aws s3 cp $OUT.zip s3://<bucket>/semantic-layer.zip && aws lambda publish-layer-version \\"
echo "  --layer-name agent-knowledge-embedding --content S3Bucket=<bucket>,S3Key=semantic-layer.zip \\"
echo "  --compatible-runtimes python3.11 --compatible-architectures x86_64"
