#!/usr/bin/python3
"""Attention on the default Vulkan device from numpy: RoPE on Q and K, causal attention
with grouped-query heads, the result compared with the same formula in numpy, and the
attention probabilities saved as a heatmap (a PNG, when matplotlib is installed).

    samples/python/attention_demo.py [--backend vulkan|cpu] [--out attention_demo.png] [--seed N]

Run it from a build tree with PYTHONPATH=build/python, or after `cmake --install`.
Exit status 1 when the device and numpy disagree, 2 for a bad argument or a heatmap that
cannot be written."""
import argparse
import sys

import numpy as np

import vkattn

T, H, KVH, D = 24, 4, 2, 64  # 24 tokens, 4 query heads sharing 2 KV heads


def rope_numpy(x, positions, base=10000.0):
    """Hugging Face's rotate_half layout: pairs (i, i + D/2)."""
    theta = base ** (-np.arange(0, D, 2) / D)
    angle = np.asarray(positions, np.float64)[:, None, None] * theta
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    c, s = np.cos(angle), np.sin(angle)
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def attention_numpy(q, k, v):
    k, v = np.repeat(k, H // KVH, axis=1), np.repeat(v, H // KVH, axis=1)
    s = np.einsum("thd,nhd->htn", q, k) / np.sqrt(D)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)  # causal
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("htn,nhd->thd", p, v), p


def save_heatmap(probs, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no heatmap")
        return True
    fig, axes = plt.subplots(1, H, figsize=(3 * H, 3.4), constrained_layout=True)
    for h, ax in enumerate(axes):
        image = ax.imshow(probs[:, h, :], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"head {h} (kv head {h // (H // KVH)})")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    fig.colorbar(image, ax=axes, shrink=0.8, label="probability")
    fig.suptitle(title)
    try:
        fig.savefig(path, dpi=100)
    except (OSError, ValueError) as e:  # a folder missing or read-only; a format matplotlib lacks
        print(f"attention_demo.py: --out {path}: cannot write it ({getattr(e, 'strerror', None) or e})",
              file=sys.stderr)
        return False
    print(f"attention probabilities: {path}")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vulkan", choices=["vulkan", "cpu"])
    parser.add_argument("--out", default="attention_demo.png", help="the heatmap's PNG file")
    parser.add_argument("--seed", type=int, default=1, help="numpy's seed for Q, K and V (>= 0)")
    args = parser.parse_args()
    if args.seed < 0:
        parser.error(f"--seed = {args.seed}; valid: >= 0")

    rng = np.random.default_rng(args.seed)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k = rng.standard_normal((T, KVH, D)).astype(np.float32)
    v = rng.standard_normal((T, KVH, D)).astype(np.float32)
    positions = np.arange(T, dtype=np.int32)

    backend = vkattn.Backend(args.backend)
    print(f"device: {backend.device_name}")
    qt, kt, vt = backend.tensor(q), backend.tensor(k), backend.tensor(v, dtype="f16")  # V as halves
    with backend.commands() as cmd:  # one submission for the whole block
        cmd.rope(qt, kt, positions)
        out = cmd.attention(qt, kt, vt, q_positions=positions)
        probs = cmd.attn_softmax(cmd.attn_scores(qt, kt, q_positions=positions))

    # numpy sees V as the device stores it: rounded to f16.
    v16 = v.astype(np.float16).astype(np.float64)
    want_out, want_p = attention_numpy(rope_numpy(q, positions), rope_numpy(k, positions), v16)
    out_err = np.abs(out.numpy() - want_out).max()
    p_err = np.abs(probs.numpy() - want_p.transpose(1, 0, 2)).max()
    print(f"max |out - numpy| = {out_err:.2e}, max |probabilities - numpy| = {p_err:.2e}")
    saved = save_heatmap(probs.numpy(), args.out, f"causal attention, GQA {H}:{KVH}, {backend.device_name}")
    # The tests' tolerances (docs/attention.md): out 1e-4 + 1e-4 relative, probabilities 1e-5.
    # A disagreement outranks a heatmap that could not be written.
    return 1 if out_err >= 1e-3 or p_err >= 1e-5 else 0 if saved else 2


if __name__ == "__main__":
    sys.exit(main())
