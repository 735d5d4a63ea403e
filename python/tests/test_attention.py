"""Attention against softmax(q k^T * scale + biases) v in torch (float64, GQA by
repeat_interleave): causal, window, mask, softcap, ALiBi, sinks, non-causal, chunks, a
symmetric window, the query temperature; f32 and f16
K/V; both backends and both paths of CommandList.attention; the three stages' scores and
probabilities. One shape throughout, so that lavapipe builds few pipelines."""
import math
import os

import numpy as np
import pytest

import vkattn
from reference import assert_close, attention, f64

T, N, H, KVH, D = 6, 16, 4, 2, 32  # GQA 4:2
rng = np.random.default_rng(11)
Q = rng.standard_normal((T, H, D)).astype(np.float32)
K = rng.standard_normal((N, KVH, D)).astype(np.float32)
V = rng.standard_normal((N, KVH, D)).astype(np.float32)
MASK = rng.uniform(-2, 0, (T, N)).astype(np.float32)
Q_POS = np.arange(N - T, N, dtype=np.int32)  # the last T keys' positions: a prefill chunk
K_POS = np.arange(N, dtype=np.int32)
SLOPES = vkattn.alibi_slopes(H)
SINKS = [0.5, -1.0, 2.0, 0.0]

# Each case: the op's keyword arguments, and the reference's.
CASES = {
    "causal": ({}, {}),
    "noncausal": ({"causal": False}, {"causal": False}),
    "window": ({"window": 3}, {"window": 3}),
    "mask": ({"mask": MASK}, {"mask": MASK}),
    "softcap": ({"softcap": 2.0, "scale": 1.0}, {"softcap": 2.0, "scale": 1.0}),
    "alibi": ({"alibi": True}, {"alibi_slopes": SLOPES}),
    "sinks": ({"sinks": SINKS}, {"sinks": SINKS}),
    "Chunked": ({"chunk": 4}, {"chunk": 4}),
    "SymmetricWindow": ({"causal": False, "window": 5, "window_type": "symmetric"},
                        {"causal": False, "window": 5, "symmetric": True}),
    "QueryTemperature": ({"query_temperature": vkattn.QueryTemperature(floor_scale=2, scale=0.5, offset=1),
                          "softcap": 2.0, "scale": 1.0},
                         {"temperature": (2, 0.5, 1), "softcap": 2.0, "scale": 1.0}),
}


def run_case(backend, case, kv_dtype, path):
    op_kw, ref_kw = CASES[case]
    op_kw = dict(op_kw)
    q, k, v = backend.tensor(Q), backend.tensor(K, dtype=kv_dtype), backend.tensor(V, dtype=kv_dtype)
    if "mask" in op_kw:
        op_kw["mask"] = backend.tensor(op_kw["mask"])
    with backend.commands() as cmd:
        out = cmd.attention(q, k, v, q_positions=Q_POS, k_positions=K_POS, path=path, **op_kw)
    # The reference sees K and V as stored: rounded to f16 when the tensor is f16.
    k_ref, v_ref = (K, V) if kv_dtype == "f32" else (K.astype(np.float16), V.astype(np.float16))
    return out.numpy(), attention(f64(Q), f64(k_ref), f64(v_ref), Q_POS, K_POS, **ref_kw)


@pytest.mark.parametrize("path", ["fused", "three_stages"])
@pytest.mark.parametrize("kv_dtype", ["f32", "f16"])
@pytest.mark.parametrize("case", list(CASES))
def test_attention_matches_torch(backend, case, kv_dtype, path):
    got, want = run_case(backend, case, kv_dtype, path)
    assert got.dtype == np.float32
    assert_close(got, want, 1e-4, 1e-4, f"{case} {kv_dtype} {path}")


def test_reference_cases_differ():
    """Every case changes the result, so that a case the library ignored would fail."""
    base = attention(f64(Q), f64(K), f64(V), Q_POS, K_POS)
    for case, (_, ref_kw) in CASES.items():
        if case != "causal":
            assert not np.allclose(attention(f64(Q), f64(K), f64(V), Q_POS, K_POS, **ref_kw), base, atol=1e-3), case


def test_three_stages(backend):
    """attn_scores, attn_softmax (in place) and attn_weighted_sum, each against torch: scores
    -inf exactly where a key is hidden, probabilities 0 there."""
    q, k, v = backend.tensor(Q), backend.tensor(K), backend.tensor(V)
    mask = backend.tensor(MASK)
    config = vkattn.AttentionConfig(window=4, alibi=True)
    with backend.commands() as cmd:
        scores = cmd.attn_scores(q, k, q_positions=Q_POS, mask=mask, config=config)
        raw = backend.zeros(scores.shape)
        cmd.copy(scores, raw)
        probs = cmd.attn_softmax(scores, scores, config=config)
        out = cmd.attn_weighted_sum(probs, v)
    want_out, want_s, want_p = attention(f64(Q), f64(K), f64(V), Q_POS, K_POS, window=4, mask=MASK,
                                         alibi_slopes=SLOPES, return_probs=True)
    got_s = raw.numpy()
    hidden = np.isinf(want_s.numpy())
    assert np.array_equal(np.isneginf(got_s), hidden)
    assert_close(got_s[~hidden], want_s.numpy()[~hidden], 1e-4, 1e-5, "scores")
    got_p = probs.numpy()
    assert np.all(got_p[hidden] == 0)
    assert_close(got_p, want_p, 1e-5, 0, "probs")
    assert_close(out.numpy(), want_out, 1e-4, 1e-4, "out")


def test_all_hidden_rows_are_zero(backend):
    """Queries before every key see nothing: zeros, never NaN."""
    q, k, v = backend.tensor(Q), backend.tensor(K), backend.tensor(V)
    with backend.commands() as cmd:
        out = cmd.attention(q, k, v, q_positions=Q_POS, k_positions=K_POS + 100)
    assert np.array_equal(out.numpy(), np.zeros_like(Q))


def test_sequences_do_not_mix(backend):
    """Two sequences in one call: each query sees only its own sequence's keys."""
    q_seq = np.array([0, 0, 0, 1, 1, 1], np.int32)
    k_seq = np.array([0, 1] * (N // 2), np.int32)
    q_pos = np.array([15, 15, 15, 15, 15, 15], np.int32)
    q, k, v = backend.tensor(Q), backend.tensor(K), backend.tensor(V)
    with backend.commands() as cmd:
        out = cmd.attention(q, k, v, q_positions=q_pos, k_positions=K_POS, q_seq_ids=q_seq, k_seq_ids=k_seq)
    got = out.numpy()
    for s in (0, 1):
        rows, keys = q_seq == s, k_seq == s
        want = attention(f64(Q[rows]), f64(K[keys]), f64(V[keys]), q_pos[rows], K_POS[keys])
        assert_close(got[rows], want, 1e-4, 1e-4, f"sequence {s}")


def test_scale_and_cap_orders(cpu):
    """cap_then_scale caps the unscaled product, then scales."""
    q, k = cpu.tensor(Q), cpu.tensor(K)
    with cpu.commands() as cmd:
        scores = cmd.attn_scores(q, k, q_positions=Q_POS, causal=False, softcap=3.0, scale=0.5,
                                 softcap_order="cap_then_scale")
    qk = np.einsum("thd,nhd->thn", f64(Q).numpy(), np.repeat(f64(K).numpy(), H // KVH, axis=1))
    assert_close(scores.numpy(), 0.5 * 3.0 * np.tanh(qk / 3.0), 1e-5, 1e-5, "scores")
    assert math.isclose(float(np.max(np.abs(scores.numpy()))), 1.5, rel_tol=0.1)


def test_f16_products(cpu):
    """precision="f16_products" on the CPU backend: the f32 result of inputs rounded to f16;
    the stage ops refuse it by name."""
    q, k, v = cpu.tensor(Q), cpu.tensor(K), cpu.tensor(V)
    half = [cpu.tensor(x.astype(np.float16).astype(np.float32)) for x in (Q, K, V)]
    with cpu.commands() as cmd:
        got = cmd.attention(q, k, v, q_positions=Q_POS, precision="f16_products")
        want = cmd.attention(*half, q_positions=Q_POS)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(ValueError, match="config.precision"):
        with cpu.commands() as cmd:
            cmd.attn_scores(q, k, q_positions=Q_POS, precision=vkattn.AttentionPrecision.f16_products)


def test_mask_keys(backend):
    """mask_keys, a promise that each mask row leaves few keys (DeepSeek V3.2's top-k): the
    result is the masked attention's, whichever kernel reads it; without a mask, refused."""
    pick = np.random.default_rng(5)
    mask = np.full((T, N), -np.inf, np.float32)
    for t in range(T):
        mask[t, pick.choice(N, 3, replace=False)] = pick.uniform(-1, 1, 3)
    q, k, v, m = backend.tensor(Q), backend.tensor(K), backend.tensor(V), backend.tensor(mask)
    with backend.commands() as cmd:
        got = cmd.attention(q, k, v, q_positions=Q_POS, mask=m, mask_keys=3)
        want = cmd.attention(q, k, v, q_positions=Q_POS, mask=m)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert cmd.stats()["attention"][0]["sparse"] is False  # the kernels here read every key
    with pytest.raises(ValueError, match="config.mask_keys"):
        with backend.commands() as cmd:
            cmd.attention(q, k, v, q_positions=Q_POS, mask_keys=3)


def test_key_list(backend):
    """A key list (an int32 mask [n_tokens, width]: the keys each token may see, -1 none, a
    repeat once) gives the attention of the f32 mask it stands for; as attention()'s alone."""
    pick = np.random.default_rng(7)
    mask = np.full((T, N), -np.inf, np.float32)
    keys = np.full((T, 5), -1, np.int32)
    for t in range(T):
        keys[t, :3] = pick.choice(N, 3, replace=False)
        keys[t, 3] = keys[t, 0]
        mask[t, keys[t, :3]] = 0.0
    q, k, v = backend.tensor(Q), backend.tensor(K), backend.tensor(V)
    with backend.commands() as cmd:
        got = cmd.attention(q, k, v, q_positions=Q_POS, mask=backend.tensor(keys))
        want = cmd.attention(q, k, v, q_positions=Q_POS, mask=backend.tensor(mask))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="mask.dtype"):
        with backend.commands() as cmd:
            cmd.attn_scores(q, k, q_positions=Q_POS, mask=backend.tensor(keys))


def test_mask_keys_group_kernel(vulkan, cpu, monkeypatch):
    """The group decode kernel (forced on the GPU shape) reads only the kept keys, given as an
    f32 mask with mask_keys or as a key list, says so in the stats, and agrees with the CPU
    backend."""
    from conftest import CACHE_DIR
    monkeypatch.setenv("VKATTN_DECODE", "kernel=group")
    validation = os.environ.get("VKATTN_TEST_VALIDATION") != "0"
    heads, dk, dv, n = 16, 192, 128, 300
    pick = np.random.default_rng(6)
    q = pick.standard_normal((1, heads, dk)).astype(np.float32)
    k = pick.standard_normal((n, 1, dk)).astype(np.float32)
    v = pick.standard_normal((n, 1, dv)).astype(np.float32)
    keys = pick.choice(n, 20, replace=False).astype(np.int32).reshape(1, 20)
    mask = np.full((1, n), -np.inf, np.float32)
    mask[0, keys[0]] = 0.0
    outs = []
    with vkattn.Backend("vulkan", validation=validation, pipeline_cache_dir=CACHE_DIR, kernels="gpu") as gpu:
        # A row takes 8 lanes of the subgroups the kernels ask for (16, or the nearest the
        # device allows): on narrower ones the decode kernel reads every key.
        lim = gpu.limits
        lanes = min(max(16, lim.subgroup_min_size), lim.subgroup_max_size) if lim.subgroup_size_control \
            else lim.subgroup_size
        kernel = "group" if lanes >= 8 else "decode"
        for b in (gpu, cpu):
            for form in ({"mask": mask, "mask_keys": 20}, {"mask": keys}):
                with b.commands() as cmd:
                    out = cmd.attention(b.tensor(q), b.tensor(k), b.tensor(v), q_positions=[n - 1], path="fused",
                                        mask=b.tensor(form["mask"]), mask_keys=form.get("mask_keys", 0))
                outs.append(out.numpy())
                runs = cmd.stats()["attention"]
                assert runs[0]["sparse"] is (b is gpu and lanes >= 8)
                assert runs[0]["kernel"] == (kernel if b is gpu else "reference")
        assert gpu.validation_messages() == []
    for got in outs[:2]:
        np.testing.assert_allclose(got, outs[2], rtol=1e-4, atol=2e-4)
    np.testing.assert_array_equal(outs[3], outs[2])


def test_mla_value_width_differs(backend):
    """V rows of 16 under K rows of 32 (DeepSeek's 192 and 128, scaled down): plain tensors
    on both paths and a cache with v_head_dim; out is [T, H, 16]."""
    v16 = np.ascontiguousarray(V[:, :, :16])
    want = attention(f64(Q), f64(K), f64(v16), Q_POS, K_POS)
    q, k, v = backend.tensor(Q), backend.tensor(K), backend.tensor(v16)
    for path in ("fused", "three_stages"):
        with backend.commands() as cmd:
            out = cmd.attention(q, k, v, q_positions=Q_POS, k_positions=K_POS, path=path)
        assert out.shape == (T, H, 16)
        assert_close(out.numpy(), want, 1e-4, 1e-4, path)
    cache = backend.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=N, dtype=np.float32, v_head_dim=16)
    assert cache.config.v_head_dim == 16
    with backend.commands() as cmd:
        cmd.kv_append(cache, k, v, K_POS)
        out = cmd.attention(q, cache, q_positions=Q_POS)
    assert_close(out.numpy(), want, 1e-4, 1e-4, "cache")


def test_mla_latent_cache(backend):
    """A latent cache (absorbed MLA): V is the first 16 dims of each 32-dim key row, stored
    once; kv_append takes K alone (kv_append(cache, k, positions), as the C++ call and the
    error message have it, or v=None), out is [T, H, 16]; nbytes counts K alone; a V given
    to it, K alone for a cache that is not latent, and v_head_dim > head_dim are refused."""
    want = attention(f64(Q), f64(K), f64(np.ascontiguousarray(K[:, :, :16])), Q_POS, K_POS)
    q, k = backend.tensor(Q), backend.tensor(K)
    for append in (lambda cmd, c: cmd.kv_append(c, k, K_POS), lambda cmd, c: cmd.kv_append(c, k, None, K_POS),
                   lambda cmd, c: cmd.kv_append(c, k, positions=K_POS, seq_ids=np.zeros(N, np.int32)),
                   lambda cmd, c: cmd.kv_append(c, k, K_POS, None, keep_last=True)):
        cache = backend.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=N, dtype=np.float32, v_head_dim=16, latent=True)
        assert cache.config.latent and cache.nbytes == N * KVH * D * 4
        with backend.commands() as cmd:
            append(cmd, cache)
            out = cmd.attention(q, cache, q_positions=Q_POS)
        assert out.shape == (T, H, 16) and cache.next_position() == N
        assert_close(out.numpy(), want, 1e-4, 1e-4, "latent")
    with pytest.raises(vkattn.InvalidArgument, match=r"kv_append: v = a tensor; valid: none: a latent cache stores V"
                                                     r".*: call kv_append\(cache, k, positions\)"):
        backend.commands().kv_append(cache, k, k, K_POS)
    plain = backend.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=N, dtype=np.float32)
    for alone in (lambda cmd: cmd.kv_append(plain, k, None, K_POS), lambda cmd: cmd.kv_append(plain, k, K_POS)):
        with pytest.raises(vkattn.InvalidArgument, match=r"kv_append: v = none \(K alone\)"):
            alone(backend.commands())
    with pytest.raises(vkattn.InvalidArgument, match=r"config\.v_head_dim = 64; valid: \[1, head_dim = 32\] for a latent"):
        backend.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=N, v_head_dim=64, latent=True)
