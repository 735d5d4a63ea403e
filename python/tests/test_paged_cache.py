"""A paged KV cache driven as an engine drives one: a prompt prefilled into one sequence,
forked for parallel sampling (the forks share its blocks), each fork decoded on its own,
finished sequences released; attention equals a ring cache's fed the same tokens, and the
pool's accounting follows what the sequences hold. A pool that runs out raises
OutOfMemoryError, changing nothing."""
import numpy as np
import pytest

import vkattn
from reference import assert_close

H, KVH, D, CAPACITY, BLOCK = 4, 2, 32, 64, 8
rng = np.random.default_rng(7)


def config(paged, n_blocks=0):
    return vkattn.KvCacheConfig(n_seqs=4, n_kv_heads=KVH, head_dim=D, capacity=CAPACITY, dtype="f16",
                                paged=paged, block_size=BLOCK, n_blocks=n_blocks)


def step(backend, caches, seqs, positions):
    """Appends one token to each listed sequence of every cache, then attends; the outputs."""
    k = rng.standard_normal((len(seqs), KVH, D)).astype(np.float32)
    v = rng.standard_normal((len(seqs), KVH, D)).astype(np.float32)
    q = rng.standard_normal((len(seqs), H, D)).astype(np.float32)
    outs = []
    for cache in caches:
        with backend.commands() as cmd:
            cmd.kv_append(cache, backend.tensor(k), backend.tensor(v), positions, seqs)
            out = cmd.attention(backend.tensor(q), cache, q_positions=positions, q_seq_ids=seqs)
        outs.append(out.numpy())  # written when the list ran, at the block's end
    assert np.abs(outs[0]).max() > 0.1
    return outs


def test_parallel_sampling_matches_ring(backend):
    ring, paged = backend.kv_cache(config=config(False)), backend.kv_cache(config=config(True, n_blocks=24))
    assert paged.config.paged and paged.free_blocks == 24
    prompt = 21  # blocks 0, 1 full; block 2 holds 5
    assert paged.blocks_to_append(prompt) == 3
    ring_out, paged_out = step(backend, (ring, paged), [0] * prompt, list(range(prompt)))
    assert_close(paged_out, ring_out, 1e-5, 1e-5, "prefill")
    for dst in (1, 2, 3):
        for cache in (ring, paged):
            with backend.commands() as cmd:
                cmd.kv_copy_sequence(cache, 0, dst)
    table = paged.block_table(0)
    for dst in (1, 2, 3):
        forked = paged.block_table(dst)
        assert forked[:2].tolist() == table[:2].tolist() and forked[2] != table[2]
    assert paged.block_refs()[table[0]] == 4
    assert paged.free_blocks == 24 - 3 - 3  # the prompt's, and one copy per fork
    for t in range(30):
        positions = [prompt + t] * 4
        ring_out, paged_out = step(backend, (ring, paged), [0, 1, 2, 3], positions)
        assert_close(paged_out, ring_out, 1e-5, 1e-5, f"decode {t}")
        if t == 10:  # sequence 3 finishes: its own blocks come back, the shared ones stay
            free = paged.free_blocks
            for cache in (ring, paged):
                cache.reset(3)
            assert paged.free_blocks == free + 2 and paged.block_refs()[table[0]] == 3
            for cache in (ring, paged):  # and is sampled again from sequence 1
                with backend.commands() as cmd:
                    cmd.kv_copy_sequence(cache, 1, 3)
    assert (paged.slot_positions(3) == ring.slot_positions(3)).all()
    assert paged.nbytes == ring.nbytes * 24 * BLOCK // (4 * CAPACITY)


def test_out_of_blocks_changes_nothing(backend):
    cache = backend.kv_cache(config=config(True, n_blocks=3))
    k = backend.tensor(rng.standard_normal((17, KVH, D)).astype(np.float32))
    assert cache.blocks_to_append(17) == 3
    with backend.commands() as cmd:
        cmd.kv_append(cache, k, k, range(17), [0] * 17)
    assert cache.free_blocks == 0 and cache.blocks_to_append(1, seq=1) == 1
    one = backend.tensor(rng.standard_normal((1, KVH, D)).astype(np.float32))
    with backend.commands() as cmd:
        with pytest.raises(vkattn.OutOfMemoryError, match="free blocks"):
            cmd.kv_append(cache, one, one, [0], [1])
    assert cache.next_position(1) == 0 and cache.free_blocks == 0
    cache.reset(0)
    assert cache.free_blocks == 3 and cache.block_table(0).tolist() == [-1] * 8
    with pytest.raises(vkattn.InvalidArgument, match="a ring cache"):
        _ = backend.kv_cache(config=config(False)).free_blocks
