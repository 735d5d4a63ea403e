"""RoPE against two torch implementations written here: Hugging Face's rotate_half (the
half layout) and the complex-number view with torch.polar (the interleaved layout), at
small and at the largest positions, f32 and f16, one tensor or Q and K in one dispatch;
the scalings' frequencies against their published formulas."""
import math

import numpy as np
import pytest
import torch

import vkattn
from reference import assert_close, f64, rope_complex, rope_mrope_hf, rope_rotate_half, thetas

T, H, KVH, D = 5, 4, 2, 32
rng = np.random.default_rng(7)
Q = rng.standard_normal((T, H, D)).astype(np.float32)
K = rng.standard_normal((T, KVH, D)).astype(np.float32)
SMALL = [0, 1, 2, 17, 4095]
LARGE = [2**31 - 1, 2**31 - 2, 1_000_003, 131_071, 65_536]  # f32 angles lose the phase here
REFERENCE = {"half": rope_rotate_half, "interleaved": rope_complex}


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("positions", [SMALL, LARGE], ids=["small", "large"])
def test_rope_matches_torch(backend, layout, positions):
    q, k = backend.tensor(Q), backend.tensor(K)
    with backend.commands() as cmd:
        cmd.rope(q, k, positions, layout=layout, base=500000.0)
    theta = thetas(D, 500000.0)
    # f32 storage of O(1) values; the angle is exact in the library at any position.
    assert_close(q.numpy(), REFERENCE[layout](f64(Q), positions, theta), 4e-6, 1e-6, "q")
    assert_close(k.numpy(), REFERENCE[layout](f64(K), positions, theta), 4e-6, 1e-6, "k")


def test_two_references_agree():
    """The two references are one rotation: the interleaved layout is the half layout
    with its dims permuted."""
    perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
    theta = thetas(D)
    half = rope_rotate_half(f64(Q)[..., perm], LARGE, theta)
    inter = rope_complex(f64(Q), LARGE, theta)[..., perm]
    assert torch.allclose(half, inter, atol=1e-9)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_f16(backend, layout):
    q = backend.tensor(Q, dtype="f16")
    with backend.commands() as cmd:
        cmd.rope(q, SMALL, config=vkattn.RopeConfig(layout=layout))
    got = q.numpy()
    assert got.dtype == np.float16
    want = REFERENCE[layout](f64(Q.astype(np.float16)), SMALL, thetas(D))
    assert_close(got, want, 1e-3, 1e-3, "q f16")


def test_rope_partial_rotary_dim(backend):
    """Dims past rotary_dim pass through unchanged."""
    q = backend.tensor(Q)
    with backend.commands() as cmd:
        cmd.rope(q, SMALL, rotary_dim=16)
    got = q.numpy()
    want = rope_rotate_half(f64(Q[..., :16]), SMALL, thetas(16))
    assert_close(got[..., :16], want, 4e-6, 1e-6, "rotated")
    assert np.array_equal(got[..., 16:], Q[..., 16:])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_on_a_slice(backend, layout):
    """rotary_offset: dims [8, 24) rotate as a head of their own (DeepSeek's MLA rotates the
    last 64 of 576); the dims around the slice pass through unchanged."""
    q = backend.tensor(Q)
    with backend.commands() as cmd:
        cmd.rope(q, SMALL, layout=layout, rotary_dim=16, rotary_offset=8)
    got = q.numpy()
    want = REFERENCE[layout](f64(Q[..., 8:24]), SMALL, thetas(16))
    assert_close(got[..., 8:24], want, 4e-6, 1e-6, "rotated slice")
    assert np.array_equal(got[..., :8], Q[..., :8])
    assert np.array_equal(got[..., 24:], Q[..., 24:])
    with pytest.raises(vkattn.InvalidArgument, match="config.rotary_offset = 7"):
        with backend.commands() as cmd:
            cmd.rope(q, SMALL, rotary_offset=7)


@pytest.mark.parametrize("scaling", ["linear", "ntk", "llama3"])
def test_scaled_rope(backend, scaling):
    """Each scaling's frequencies as the published formulas give them, then the rotation."""
    factor, base = 8.0, 500000.0
    config = vkattn.RopeConfig(base=base, scaling=scaling, factor=factor, original_context=256)
    inv = thetas(D, base)
    if scaling == "linear":
        want = inv / factor
    elif scaling == "ntk":
        want = thetas(D, base * factor ** (D / (D - 2)))
    else:  # Hugging Face's _compute_llama3_parameters
        low, high, old = 1.0, 4.0, 256
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv / factor + smooth * inv
        want = torch.where(wavelen > old / low, inv / factor, torch.where(wavelen < old / high, inv, smoothed))
    theta, attention_factor = vkattn.rope_frequencies(D, config=config)
    assert attention_factor == 1.0
    assert_close(theta, want, 0, 1e-12, "theta")

    q = backend.tensor(Q)
    with backend.commands() as cmd:
        cmd.rope(q, LARGE, config=config)
    assert_close(q.numpy(), rope_rotate_half(f64(Q), LARGE, want), 4e-6, 1e-6, "q")


def test_yarn_attention_factor():
    """YaRN's default attention factor is 0.1 ln(factor) + 1; an explicit one replaces it."""
    _, f = vkattn.rope_frequencies(D, scaling="yarn", factor=4.0, original_context=256)
    assert f == pytest.approx(0.1 * math.log(4.0) + 1)
    _, f = vkattn.rope_frequencies(D, scaling="yarn", factor=4.0, original_context=256, attention_factor=1.5)
    assert f == 1.5


@pytest.mark.parametrize("interleaved", [False, True], ids=["contiguous", "interleaved"])
def test_mrope_matches_hugging_face(backend, interleaved):
    """M-RoPE: positions [n_tokens, 3] (text, then image patches with their own h and w),
    sections counted in rotary pairs, against Hugging Face's formula in torch."""
    thw = np.array([[0, 0, 0], [1, 1, 1], [2, 2, 3], [2, 3, 2], [4, 4, 4]], dtype=np.int32)
    sections = [4, 6, 6] if not interleaved else [6, 5, 5]
    q = backend.tensor(Q)
    mrope = vkattn.MRope(sections=sections, layout="interleaved" if interleaved else "contiguous")
    with backend.commands() as cmd:
        cmd.rope(q, thw, mrope=mrope, base=1e6)
    want = rope_mrope_hf(f64(Q), thw, thetas(D, 1e6), sections, interleaved)
    assert_close(q.numpy(), want, 4e-6, 1e-6, "q")
    # The image's h and w matter: plain RoPE at t differs.
    plain = rope_rotate_half(f64(Q), thw[:, 0], thetas(D, 1e6))
    assert not np.allclose(q.numpy(), plain, atol=1e-3)


def test_mrope_replay_takes_three_positions_per_token(backend):
    """A rope op with M-RoPE replayed (set_tokens with [n_tokens, 3] positions) rotates as
    Hugging Face's formula says for the new positions."""
    mrope = vkattn.MRope(sections=[6, 5, 5], layout="interleaved")
    q = backend.tensor(Q[:1])
    step = backend.commands()
    step.rope(q, np.zeros((1, 3), dtype=np.int32), mrope=mrope, base=1e6)
    step.submit()
    for thw in ([[3, 4, 5]], [[7, 7, 7]], [[9, 2, 30]]):
        q.upload(Q[:1])  # the op rotates q in place
        step.set_tokens(np.array(thw, dtype=np.int32))
        step.submit()
        want = rope_mrope_hf(f64(Q[:1]), np.array(thw), thetas(D, 1e6), [6, 5, 5], True)
        assert_close(q.numpy(), want, 4e-6, 1e-6, f"replayed {thw}")


def test_mrope_replay_takes_its_positions_apart(backend):
    """set_tokens(positions, mrope_positions=...): the M-RoPE op takes mrope_positions
    ([n_tokens, 3], or one per token: t = h = w), the list's other ops positions."""
    mrope = vkattn.MRope(sections=[6, 5, 5])
    q, k, v = backend.tensor(Q[:1]), backend.tensor(K[:1]), backend.tensor(K[:1])
    cache = backend.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=16)
    step = backend.commands()
    step.rope(q, k, np.zeros((1, 3), dtype=np.int32), mrope=mrope, base=1e6)
    step.kv_append(cache, k, v, [0])
    step.submit()
    for index, thw, rows in ((1, [[3, 4, 5]], [[3, 4, 5]]), (2, [7], [[7, 7, 7]])):
        q.upload(Q[:1])
        step.set_tokens([index], mrope_positions=thw)
        step.submit()
        want = rope_mrope_hf(f64(Q[:1]), np.array(rows), thetas(D, 1e6), [6, 5, 5], False)
        assert_close(q.numpy(), want, 4e-6, 1e-6, f"replayed {thw}")
    assert cache.next_position(0) == 3  # the append took positions
