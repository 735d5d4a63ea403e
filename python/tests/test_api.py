"""The module's own promises: tensors to and from numpy and torch (float32 and float16
exactly both ways, int32, quantized dtypes dequantized), command lists as context managers,
timings as (op, ms), stats, threads, devices, and help() text."""
import threading

import numpy as np
import pytest
import torch

import vkattn
from reference import assert_close, f64, rope_rotate_half, thetas

rng = np.random.default_rng(5)
A = rng.standard_normal((3, 2, 32)).astype(np.float32)


def test_round_trips(backend):
    t = backend.tensor(A)
    assert (t.shape, t.dtype, t.numel, t.nbytes) == ((3, 2, 32), vkattn.DType.f32, 192, 768)
    assert np.array_equal(t.numpy(), A) and t.numpy().dtype == np.float32
    h = A.astype(np.float16)
    th = backend.tensor(h)
    assert th.dtype == vkattn.DType.f16 and th.numpy().dtype == np.float16
    assert np.array_equal(th.numpy().view(np.uint16), h.view(np.uint16))  # bit for bit
    # float32 into an f16 tensor rounds to nearest even, as numpy's cast does.
    assert np.array_equal(backend.tensor(A, dtype="float16").numpy(), h)
    # float16 into an f32 tensor is exact.
    assert np.array_equal(backend.tensor(h, dtype=vkattn.DType.f32).numpy(), h.astype(np.float32))
    i = np.arange(-5, 6, dtype=np.int32)
    assert np.array_equal(backend.tensor(i).numpy(), i)
    assert np.array_equal(np.asarray(t), A)
    odd = backend.tensor(np.ones(3, np.float16))  # an odd count of halves fills part of a word
    assert np.array_equal(odd.numpy(), np.ones(3, np.float16))


def test_quantized_tensors(backend):
    t = backend.tensor(A, dtype="q8_0")
    assert t.dtype == vkattn.DType.q8_0
    got = t.numpy()
    assert got.dtype == np.float32
    scale = np.abs(A).max(axis=-1, keepdims=True) / 127  # one block of 32 per row
    assert np.all(np.abs(got - A) <= scale / 2 + 1e-3 * scale)


def test_torch_tensors(backend):
    x = torch.from_numpy(A.copy())
    assert np.array_equal(backend.tensor(x).numpy(), A)
    y = x.clone().requires_grad_(True)  # converted through detach()
    assert np.array_equal(backend.tensor(y).numpy(), A)
    assert np.array_equal(backend.tensor(torch.nn.Parameter(x.clone())).numpy(), A)  # a torch subclass
    assert backend.tensor(x.half()).dtype == vkattn.DType.f16
    with pytest.raises(vkattn.InvalidArgument, match="data.dtype = float64"):
        backend.tensor(x.double())
    # Positions from torch's default int64 tensors, each read whole (2^31 - 1 needs every bit).
    q = backend.tensor(x)
    positions = [1, 2**31 - 1, 70000]
    with backend.commands() as cmd:
        cmd.rope(q, torch.tensor(positions))
    assert_close(q.numpy(), rope_rotate_half(f64(A), positions, thetas(32)).numpy(), 2e-5, 0)


def test_context_manager_submits_unless_raised(backend):
    x = backend.tensor(A)
    y = backend.zeros(A.shape)
    with backend.commands() as cmd:
        cmd.copy(x, y)
    assert np.array_equal(y.numpy(), A)
    z = backend.zeros(A.shape)
    with pytest.raises(RuntimeError, match="stop"):
        with backend.commands() as cmd:
            cmd.copy(x, z)
            raise RuntimeError("stop")
    assert not z.numpy().any()
    with pytest.raises(vkattn.InvalidArgument, match="with-block raised"):  # dropped, never submitted
        cmd.submit()
    assert not z.numpy().any()


def test_resubmit_reruns(backend):
    x = backend.tensor(np.zeros((1, 1, 2), np.float32))
    one = backend.tensor(np.ones((1, 1, 2), np.float32))
    cmd = backend.commands()
    cmd.copy(one, x)
    cmd.submit()
    one.upload(np.full((1, 1, 2), 7, np.float32))
    cmd.submit()
    assert np.array_equal(x.numpy(), np.full((1, 1, 2), 7, np.float32))
    assert cmd.stats()["submits"] == 2 and cmd.stats()["ops"] == 1


def test_wait_runs_nothing(backend):
    x = backend.tensor(np.zeros((1, 1, 2), np.float32))
    one = backend.tensor(np.ones((1, 1, 2), np.float32))
    cmd = backend.commands()
    assert cmd.wait(0) is True  # nothing submitted
    cmd.copy(one, x)
    cmd.submit()
    one.upload(np.full((1, 1, 2), 7, np.float32))
    assert cmd.wait() is True and cmd.wait(0.5) is True and cmd.wait(float("inf")) is True
    assert np.array_equal(x.numpy(), np.ones((1, 1, 2), np.float32))  # not run again
    assert cmd.stats()["submits"] == 1
    for bad in (-1, -0.5, float("nan")):
        with pytest.raises(vkattn.InvalidArgument, match=r"wait: timeout = .*; valid: a number of seconds >= 0, or None"):
            cmd.wait(bad)
    with pytest.raises(TypeError, match="wait: timeout"):
        cmd.wait("1")


def test_stats_name_each_attention_ops_kernels(backend):
    q = backend.tensor(rng.standard_normal((2, 4, 32)).astype(np.float32))
    k = backend.tensor(rng.standard_normal((16, 2, 32)).astype(np.float32))
    out = backend.zeros((2, 4, 32))
    cmd = backend.commands()
    cmd.attention(q, k, k, out, q_positions=[14, 15], path="three_stages")
    cmd.attention(q, k, k, out, q_positions=[14, 15], path="fused", precision="f16_products")
    runs = cmd.stats()["attention"]
    assert len(runs) == 2
    if backend.kind == vkattn.BackendKind.cpu:
        assert [r["kernel"] for r in runs] == ["reference", "reference"]
        assert [r["precision"] for r in runs] == ["f32", "f16_products"]
    else:
        assert runs[0]["kernel"] == "three_stages"
        # lavapipe has no matrix units: the exact fused kernel, and the stats say f32
        assert runs[1]["kernel"] == "lane_per_key" and runs[1]["precision"] == "f32"
    assert all(r["splits"] >= 1 for r in runs)
    assert all(r["sparse"] is False for r in runs)


def test_timings(backend):
    q = backend.tensor(rng.standard_normal((2, 4, 32)).astype(np.float32))
    k = backend.tensor(rng.standard_normal((16, 2, 32)).astype(np.float32))
    cmd = backend.commands(timestamps=True)
    cmd.rope(q, [14, 15])
    cmd.attention(q, k, k, q_positions=[14, 15], path="fused")
    assert cmd.timings() == []
    cmd.submit()
    timings = cmd.timings()
    assert [op for op, _ in timings][0] == "rope" and {op for op, _ in timings} == {"rope", "attention"}
    assert all(isinstance(ms, float) and ms >= 0 for _, ms in timings)


def test_threads(backend):
    """Lists of several threads at once (the GIL is released while they run)."""
    results, errors = {}, []

    def work(i):
        try:
            x = backend.tensor(np.full((64, 2, 32), i, np.float32))
            y = backend.zeros((64, 2, 32))
            for _ in range(5):
                with backend.commands() as cmd:
                    cmd.copy(x, y)
            results[i] = y.numpy()
        except Exception as e:  # reported below, on the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(np.all(results[i] == i) for i in range(4))


def test_two_threads_in_one_list_are_refused(backend):
    """A list belongs to one thread at a time: a call while another thread is inside it
    raises InvalidArgument (ops release the GIL, so without the check the two raced on the
    list, and the interpreter died)."""
    x = backend.tensor(np.ones((4, 2, 16), np.float32))
    cmd = backend.commands()
    recorded, other = [], []

    def work():
        for _ in range(300):
            try:
                cmd.rope(x, [1, 2, 3, 4])
                recorded.append(1)
            except vkattn.InvalidArgument as e:
                if "rope: this = a list in use by another thread now" not in str(e):
                    other.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert other == []
    assert cmd.stats()["ops"] == len(recorded)
    cmd.submit()


def test_devices_and_configs(vulkan):
    devices = vkattn.devices()
    assert sum(d.chosen for d in devices) == 1
    assert [d.name for d in devices if d.chosen] == [vulkan.device_name]
    assert vulkan.kind == vkattn.BackendKind.vulkan and vulkan.limits.max_storage_buffer_range > 0
    c = vkattn.RopeConfig(layout="interleaved", base=5e5)
    assert c.layout == vkattn.RopeLayout.interleaved and c.base == 5e5 and c.attention_factor is None
    assert "layout=RopeLayout.interleaved" in repr(c)
    a = vkattn.AttentionConfig(window=4, sinks=[1.0, 2.0])
    assert a.window == 4 and a.sinks == [1.0, 2.0] and a.causal
    assert a.window_type == vkattn.WindowType.trailing and a.chunk is None and a.query_temperature is None
    a = vkattn.AttentionConfig(causal=False, window=8, window_type="symmetric", chunk=8192,
                               query_temperature=vkattn.QueryTemperature(scale=0.2))
    assert a.window_type == vkattn.WindowType.symmetric and a.chunk == 8192
    t = a.query_temperature
    assert (t.floor_scale, t.scale, t.offset) == (8192, 0.2, 1)
    assert "window_type=WindowType.symmetric" in repr(a) and "chunk=8192" in repr(a)
    kv = vkattn.KvCacheConfig(n_kv_heads=2, head_dim=32, capacity=8, dtype=np.float32)
    assert kv.dtype == vkattn.DType.f32
    cache = vulkan.kv_cache(config=kv, n_sinks=2)
    assert cache.config.n_sinks == 2 and cache.config.capacity == 8
    assert cache.nbytes == 2 * 8 * 2 * 32 * 4


def test_matrix_units_reported(vulkan):
    """What the matrix-units choice decided, per device: the stand-in and off as asked, else
    the units exactly where the note is empty; a bad name is refused naming the option."""
    for d in vkattn.devices(matrix_units="standin"):
        assert d.limits.matrix_standin and not d.limits.matrix_units and "stand-in" in d.matrix_note
    for d in vkattn.devices(matrix_units=vkattn.MatrixUnits.off):
        assert not (d.limits.matrix_units or d.limits.matrix_standin) and "as asked" in d.matrix_note
    for d in vkattn.devices():
        assert d.limits.matrix_units == (d.matrix_note == "")
        assert all(isinstance(s, vkattn.MatrixShape) and s.m * s.n * s.k > 0 for s in d.matrix_shapes)
    with pytest.raises(vkattn.InvalidArgument, match="matrix_units"):
        vkattn.Backend("vulkan", matrix_units="tensor")
    assert isinstance(vulkan.limits.matrix_units, bool) and isinstance(vulkan.limits.matrix_standin, bool)


def test_query_temperature_takes_the_config_json_names():
    """Llama 4's config.json names the temperature's fields attn_scale and floor_scale:
    attn_scale is scale's alias; both at once, or a misspelling, is a TypeError."""
    t = vkattn.QueryTemperature(attn_scale=0.25, floor_scale=4096)
    assert (t.floor_scale, t.scale, t.offset) == (4096, 0.25, 1)
    with pytest.raises(TypeError, match=r"QueryTemperature\(\) got both 'scale' and its alias 'attn_scale'"):
        vkattn.QueryTemperature(scale=0.1, attn_scale=0.2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'attn_scales'"):
        vkattn.QueryTemperature(attn_scales=0.1)


def test_alibi_slopes():
    assert np.allclose(vkattn.alibi_slopes(8), 2.0 ** -np.arange(1, 9))


def test_help_text():
    assert "context manager" in vkattn.CommandList.__doc__
    assert "q_positions" in vkattn.CommandList.attention.__doc__
    # Every config keyword an op takes is in its help.
    rope_doc = vkattn.CommandList.rope.__doc__
    for name in ("layout", "rotary_dim", "rotary_offset", "base", "scaling", "factor", "original_context",
                 "sequence_length", "yarn", "llama3", "freq_factors", "attention_factor", "mrope", "[n_tokens, 3]"):
        assert name in rope_doc, name
    for name in ("scale", "causal", "window", "window_type", "chunk", "query_temperature", "softcap",
                 "softcap_order", "alibi", "alibi_slopes", "sinks", "path", "precision", "mask_keys"):
        assert name in vkattn.CommandList.attention.__doc__, name
        assert name in vkattn.CommandList.__doc__, name
    assert "kv_append(cache, k, positions" in vkattn.CommandList.kv_append.__doc__
    assert "InvalidArgument" in vkattn.__doc__
    assert vkattn.Backend.tensor.__doc__ and vkattn.KvCache.truncate.__doc__
    # Properties too (python.md: everything has a docstring).
    for cls in (vkattn.Backend, vkattn.Tensor, vkattn.KvCache, vkattn.CommandList, vkattn.DeviceInfo,
                vkattn.DeviceLimits, vkattn.MatrixShape, vkattn.AttentionConfig, vkattn.RopeConfig, vkattn.KvCacheConfig):
        for name, member in vars(cls).items():
            if isinstance(member, property):
                assert member.__doc__, f"{cls.__name__}.{name}"
