"""A decode loop of 300 tokens through a 128-slot ring against a torch rolling buffer:
each step rotates Q and K, appends K and V, and attends over the cache, as a model's layer
does; the reference keeps the keys a rolling buffer holds (with StreamingLLM's sinks kept
for ever) and attends over them. Keys stored rotated (Mistral) and rotated on read by
their place in the cache (StreamingLLM); f32 and f16 caches; saving and restoring."""
import numpy as np
import pytest
import torch

from reference import assert_close, attention, f64, rope_rotate_half, thetas

STEPS, CAPACITY, H, KVH, D = 300, 128, 4, 2, 32
rng = np.random.default_rng(3)
QS = rng.standard_normal((STEPS, 1, H, D)).astype(np.float32)
KS = rng.standard_normal((STEPS, 1, KVH, D)).astype(np.float32)
VS = rng.standard_normal((STEPS, 1, KVH, D)).astype(np.float32)
THETA = thetas(D)


class RollingBuffer:
    """The keys and values a ring of |capacity| slots holds: position p < sinks in slot p,
    later ones in sinks + (p - sinks) % (capacity - sinks), overwriting what was there."""

    def __init__(self, capacity, sinks, dtype):
        self.capacity, self.sinks, self.dtype, self.slots = capacity, sinks, dtype, {}

    def slot(self, p):
        return p if p < self.sinks else self.sinks + (p - self.sinks) % (self.capacity - self.sinks)

    def append(self, p, k, v):
        store = (lambda a: a.astype(np.float16).astype(np.float64)) if self.dtype == "f16" else np.float64
        self.slots[self.slot(p)] = (p, store(k), store(v))

    def held(self):
        """(positions, K, V) oldest first: the order of positions inside the cache."""
        entries = sorted(self.slots.values(), key=lambda e: e[0])
        return (np.array([e[0] for e in entries]), np.stack([e[1] for e in entries]),
                np.stack([e[2] for e in entries]))


def decode(backend, dtype, sinks, rope_mode, replay=False):
    cache = backend.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=CAPACITY, dtype=dtype, n_sinks=sinks,
                             rope=rope_mode)
    q, k, v = backend.zeros((1, H, D)), backend.zeros((1, KVH, D)), backend.zeros((1, KVH, D))
    out = backend.zeros((1, H, D))
    ref = RollingBuffer(CAPACITY, sinks, dtype)
    got, want = [], []
    for p in range(STEPS):
        assert cache.next_position() == p
        q.upload(QS[p])
        k.upload(KS[p])
        v.upload(VS[p])
        if replay and p > 0:  # the step recorded at the first token, replayed
            step.set_tokens([p])
            step.submit()
        else:
            step = backend.commands()
            if rope_mode == "stored":
                step.rope(q, k, [p])
            step.kv_append(cache, k, v, [p])
            step.attention(q, cache, out, q_positions=[p])
            step.submit()
        got.append(out.numpy())
        if rope_mode == "stored":
            q_ref = rope_rotate_half(f64(QS[p]), [p], THETA)
            ref.append(p, rope_rotate_half(f64(KS[p]), [p], THETA).numpy()[0], VS[p][0])
            positions, keys, values = ref.held()
        else:
            ref.append(p, KS[p][0], VS[p][0])
            positions, keys, values = ref.held()
            inside = np.arange(len(positions))  # sinks, then the ring oldest first
            keys = rope_rotate_half(torch.from_numpy(keys), inside, THETA).numpy()
            q_ref = rope_rotate_half(f64(QS[p]), [inside[-1]], THETA)
        want.append(attention(q_ref, torch.from_numpy(keys), torch.from_numpy(values), [p], positions).numpy())
    return cache, np.stack(got), np.stack(want)


@pytest.mark.parametrize("dtype,sinks,rope_mode", [("f32", 0, "stored"), ("f16", 4, "stored"), ("f32", 4, "on_read")])
def test_decode_loop_matches_rolling_buffer(backend, dtype, sinks, rope_mode):
    cache, got, want = decode(backend, dtype, sinks, rope_mode)
    tol = 2e-3 if dtype == "f16" else 1e-4
    assert_close(got, want, tol, tol, f"{dtype} sinks={sinks} {rope_mode}")
    # After 300 tokens the ring holds the sinks and the last CAPACITY - sinks positions.
    held = cache.slot_positions()
    expected = list(range(sinks)) + list(range(STEPS - CAPACITY + sinks, STEPS))
    assert sorted(held.tolist()) == expected
    assert all(held[cache.slot(p)] == p for p in expected)
    assert cache.length() == CAPACITY


@pytest.mark.parametrize("rope_mode", ["stored", "on_read"])
def test_replayed_decode_loop_matches_rolling_buffer(backend, rope_mode):
    """The same loop with the step recorded once and replayed (set_tokens) every token."""
    cache, got, want = decode(backend, "f16", 4, rope_mode, replay=True)
    assert_close(got, want, 2e-3, 2e-3, f"replayed, {rope_mode}")
    assert cache.next_position() == STEPS


def test_save_and_restore_across_backends(cpu, vulkan):
    """A cache filled on Vulkan, saved as bytes and restored on the CPU backend, gives the
    same attention there."""
    caches = [b.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=CAPACITY) for b in (vulkan, cpu)]
    k, v = vulkan.tensor(KS[:40, 0]), vulkan.tensor(VS[:40, 0])
    with vulkan.commands() as cmd:
        cmd.kv_append(caches[0], k, v, np.arange(40))
    caches[1].reset()
    cpu.restore_cache(caches[1], vulkan.save_cache(caches[0]))
    assert caches[1].next_position() == 40
    outs = []
    for b, cache in zip((vulkan, cpu), caches):
        with b.commands() as cmd:
            out = cmd.attention(b.tensor(QS[40]), cache, q_positions=[40])
        outs.append(out.numpy())  # written when the list ran, at the block's end
    assert np.abs(outs[1]).max() > 0.1
    assert_close(outs[0], outs[1], 1e-5, 1e-5, "restored")


def test_truncate_drops_positions(cpu):
    cache = cpu.kv_cache(n_kv_heads=KVH, head_dim=D, capacity=8)
    with cpu.commands() as cmd:
        cmd.kv_append(cache, cpu.tensor(KS[:6, 0]), cpu.tensor(VS[:6, 0]), range(6))
    cache.truncate(4)
    assert cache.next_position() == 4
    assert cache.slot_positions().tolist() == [0, 1, 2, 3, -1, -1, -1, -1]
