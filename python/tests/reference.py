"""What vkattn computes, written with plain torch ops in float64 (the formulas of
docs/rope.md and docs/attention.md), independently of the library."""
import math

import numpy as np
import torch


def f64(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def thetas(dim, base=10000.0):
    """theta_i = base^(-2i/dim), i in [0, dim/2)."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_rotate_half(x, positions, theta):
    """Hugging Face Llama's apply_rotary_pos_emb: x [T, H, D], pairs (i, i + D/2)."""
    angles = f64(positions)[:, None] * theta[None, :]
    emb = torch.cat((angles, angles), dim=-1)[:, None, :]
    return x * emb.cos() + rotate_half(x) * emb.sin()


def rope_complex(x, positions, theta):
    """The complex-number view (Meta's Llama): pairs (2i, 2i+1) as x + iy times e^(i m theta)."""
    t, h, d = x.shape
    xc = torch.view_as_complex(x.reshape(t, h, d // 2, 2).contiguous())
    angles = f64(positions)[:, None] * theta[None, :]
    rot = torch.polar(torch.ones_like(angles), angles)[:, None, :]
    return torch.view_as_real(xc * rot).reshape(t, h, d)


def attention(q, k, v, q_pos, k_pos, *, scale=None, causal=True, window=None, symmetric=False, chunk=None,
              temperature=None, mask=None, softcap=None, alibi_slopes=None, sinks=None, return_probs=False):
    """softmax(q k^T * scale + biases) v per head, GQA by repeat_interleave; q [T, H, D],
    k, v [N, KVH, D]; a row with no visible key gives zeros. temperature: (floor_scale,
    scale, offset), Llama 4's t(pos) multiplying q."""
    n_heads, n_kv = q.shape[1], k.shape[1]
    k = k.repeat_interleave(n_heads // n_kv, dim=1)
    v = v.repeat_interleave(n_heads // n_kv, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if temperature is not None:
        floor_scale, t_scale, offset = temperature
        t = 1.0 + t_scale * torch.log1p(torch.floor((f64(q_pos) + offset) / floor_scale))
        q = q * t[:, None, None]
    s = torch.einsum("thd,nhd->thn", q, k) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    qp, kp = f64(q_pos), f64(k_pos)
    distance = qp[:, None] - kp[None, :]
    if alibi_slopes is not None:
        s = s - f64(alibi_slopes)[None, :, None] * distance.abs()[:, None, :]
    if mask is not None:
        s = s + f64(mask)[:, None, :]
    visible = torch.ones_like(distance, dtype=torch.bool)
    if causal:
        visible &= distance >= 0
    if window is not None:
        visible &= distance.abs() <= window // 2 if symmetric else distance < window
    if chunk is not None:
        visible &= torch.floor(qp[:, None] / chunk) == torch.floor(kp[None, :] / chunk)
    s = s.masked_fill(~visible[:, None, :], -math.inf)
    if sinks is not None:
        sink = f64(sinks)[None, :, None].expand(s.shape[0], -1, 1)
        p = torch.softmax(torch.cat((s, sink), dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # rows with nothing visible
    out = torch.einsum("thn,nhd->thd", p, v)
    return (out, s, p) if return_probs else out


def assert_close(got, want, atol, rtol, what=""):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    err = np.abs(got - want) - (atol + rtol * np.abs(want))
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err[worst] <= 0, f"{what}: at {worst} got {got[worst]}, want {want[worst]} (atol {atol}, rtol {rtol})"


def rope_mrope_hf(x, thw, theta, sections, interleaved):
    """Hugging Face's M-RoPE, half layout, x [T, H, D], thw [T, 3]: Qwen2-VL's
    apply_multimodal_rotary_pos_emb (dims split by mrope_section * 2, chunk k from position
    k % 3) or Qwen3-VL's apply_interleaved_mrope (h's frequencies at 1::3 below 3 s_h,
    w's at 2::3 below 3 s_w, t's elsewhere)."""
    thw = f64(thw)
    freqs = thw.T[:, :, None] * theta[None, None, :]  # [3, T, D/2]
    if interleaved:
        f = freqs[0].clone()
        for axis in (1, 2):
            idx = slice(axis, sections[axis] * 3, 3)
            f[..., idx] = freqs[axis][..., idx]
        emb = torch.cat((f, f), dim=-1)
    else:
        emb_all = torch.cat((freqs, freqs), dim=-1)  # [3, T, D]
        chunks = emb_all.split(list(sections) * 2, dim=-1)
        emb = torch.cat([c[i % 3] for i, c in enumerate(chunks)], dim=-1)
    emb = emb[:, None, :]
    return x * emb.cos() + rotate_half(x) * emb.sin()
