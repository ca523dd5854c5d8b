"""Reference vectors for daemon/tests/models.rs, from an independent numpy (float64) forward pass
of all-MiniLM-L6-v2: read model.safetensors by hand, tokenise with HF `tokenizers` (no padding),
BERT encoder, mean pooling, L2 normalisation.

    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install numpy tokenizers
    /tmp/refvenv/bin/python daemon/tests/data/embeddings_ref.py models/all-MiniLM-L6-v2 > daemon/tests/data/embeddings_ref.json
"""
import json, math, struct, sys

import numpy as np
from tokenizers import Tokenizer

SENTENCES = [
    "This is an example sentence",
    "Each sentence is converted",
    "eating food",
    "eating bread",
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch of the old red barn.",
    "Caroline went to the LGBTQ support group on 7 May 2023 and found it inspiring.",
    "",
    "naïve café ünïcödé — emoji 🙂 and CJK 記憶",
]

def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":  # e.g. the int64 position_ids buffer
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(meta["shape"]).astype(np.float64)
    return out

erf = np.vectorize(math.erf)

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b

def embed(W, cfg, ids):
    p = lambda k: W[k] if k in W else W["bert." + k]
    n = len(ids)
    x = p("embeddings.word_embeddings.weight")[ids] + p("embeddings.position_embeddings.weight")[:n] + p("embeddings.token_type_embeddings.weight")[0]
    eps = cfg["layer_norm_eps"]
    x = layer_norm(x, p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"), eps)
    H = cfg["num_attention_heads"]; d = cfg["hidden_size"] // H
    for l in range(cfg["num_hidden_layers"]):
        pre = f"encoder.layer.{l}."
        lin = lambda t, k: t @ p(pre + k + ".weight").T + p(pre + k + ".bias")
        q = lin(x, "attention.self.query").reshape(n, H, d).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, H, d).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, H, d).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, H * d)
        x = layer_norm(x + lin(ctx, "attention.output.dense"), p(pre + "attention.output.LayerNorm.weight"), p(pre + "attention.output.LayerNorm.bias"), eps)
        h = lin(x, "intermediate.dense"); h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
        x = layer_norm(x + lin(h, "output.dense"), p(pre + "output.LayerNorm.weight"), p(pre + "output.LayerNorm.bias"), eps)
    m = x.mean(0)
    return m / np.linalg.norm(m)

def main():
    d = sys.argv[1]
    cfg = json.load(open(f"{d}/config.json"))
    W = load_safetensors(f"{d}/model.safetensors")
    tok = Tokenizer.from_file(f"{d}/tokenizer.json")
    tok.no_padding(); tok.enable_truncation(256)
    out = []
    for s in SENTENCES:
        ids = tok.encode(s).ids
        v = embed(W, cfg, np.array(ids))
        out.append({"text": s, "tokens": len(ids), "vector": [round(float(x), 7) for x in v]})
    json.dump({"model": "sentence-transformers/all-MiniLM-L6-v2", "method": "numpy float64 forward pass (embeddings_ref.py)", "items": out}, sys.stdout, ensure_ascii=False)
    print()

main()
