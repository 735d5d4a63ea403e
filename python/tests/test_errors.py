"""Bad input raises a Python exception, never crashes: vkattn.InvalidArgument (a
ValueError) naming the op, the parameter, its value and the valid range, raised before
anything is recorded; device failures a vkattn.Error subclass carrying the code.
Non-contiguous arrays are copied (the upload copies anyway), never refused."""
import numpy as np
import pytest
import torch

import vkattn

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def raises_invalid(match):
    return pytest.raises(vkattn.InvalidArgument, match=match)


def test_invalid_argument_is_a_value_error():
    assert issubclass(vkattn.InvalidArgument, ValueError)
    assert issubclass(vkattn.OutOfMemoryError, vkattn.Error) and issubclass(vkattn.OutOfMemoryError, MemoryError)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint8, np.bool_])
def test_wrong_array_dtype(cpu, dtype):
    with raises_invalid(r"vkattn: tensor: data\.dtype = .*; valid: float32 or float16") as e:
        cpu.tensor(X.astype(dtype), dtype="f32")
    assert e.value.param == "data.dtype" and e.value.op == "tensor"


def test_dtype_inferred_and_refused(cpu):
    with raises_invalid(r"tensor: data\.dtype = float64; valid: f32, f16, i32"):
        cpu.tensor(X.astype(np.float64))
    with raises_invalid(r"upload: data\.dtype = float32; valid: int32 for an i32 tensor"):
        cpu.zeros((4,), "i32").upload(np.zeros(4, np.float32))
    with raises_invalid(r"dtype = 'f64'; valid: 'f32', 'f16', 'i32', 'q8_0', 'q4_0'"):
        cpu.zeros((4,), "f64")


def test_wrong_shape_and_rank(cpu):
    t = cpu.zeros((2, 3, 4))
    with raises_invalid(r"upload: data\.shape = \(2, 12\); valid: \(2, 3, 4\), the tensor's shape"):
        t.upload(X.reshape(2, 12))
    with raises_invalid(r"tensor: data\.ndim = 0"):
        cpu.tensor(np.float32(1))
    q2d = cpu.zeros((3, 4))
    with raises_invalid(r"vkattn: rope: x\.shape = \[3, 4\]"):
        cpu.commands().rope(q2d, [0, 1, 2])
    k = cpu.zeros((5, 1, 4))
    with raises_invalid(r"vkattn: attention: q"):
        cpu.commands().attention(q2d, k, k, q_positions=[0, 1, 2])


def test_wrong_tensor_dtype_in_an_op(backend):
    q = backend.zeros((2, 4, 32), "i32")
    with raises_invalid(r"vkattn: rope: x\.dtype = i32; valid: f32 or f16"):
        backend.commands().rope(q, [0, 1])


def test_non_contiguous_arrays_are_copied(backend):
    base = np.arange(96, dtype=np.float32).reshape(4, 3, 8)
    for view in (base[:, :, ::2], base[::-1], np.asfortranarray(base), base.transpose(1, 0, 2)):
        assert not view.flags.c_contiguous
        t = backend.tensor(view)
        assert t.shape == view.shape
        assert np.array_equal(t.numpy(), view)
    tt = torch.arange(96, dtype=torch.float32).reshape(4, 3, 8).transpose(0, 1)
    assert np.array_equal(backend.tensor(tt).numpy(), tt.numpy())


@pytest.mark.parametrize("positions,match", [
    ([0, -3], r"rope: positions\[1\] = -3; valid: \[0, 2\^31 - 1\]"),
    ([0, 2**31], r"rope: positions\[1\] = 2147483648; valid: \[0, 2\^31 - 1\]"),
    (np.array([5, 2**40], np.int64), r"rope: positions\[1\] = 1099511627776"),
    ([0.5, 1.0], r"rope: positions\.dtype = float64; valid: integers"),
    ([[0, 1]], r"rope: positions\.shape = \(1, 2\); valid: 1-D"),
    ([0, 1, 2], r"rope: positions"),  # three positions for two tokens
    ([[0, 1, 2]], r"rope: positions\.shape = \(1, 3\); valid: 1-D"),  # [n, 3] without mrope
])
def test_positions_out_of_range(cpu, positions, match):
    x = cpu.zeros((2, 1, 4))
    cmd = cpu.commands()
    with raises_invalid(match):
        cmd.rope(x, positions)
    assert cmd.stats()["ops"] == 0  # nothing recorded


def test_bad_config_values_and_names(cpu):
    cmd = cpu.commands()
    x = cpu.zeros((1, 1, 8))
    with raises_invalid(r"rope: config\.base = -1; valid"):
        cmd.rope(x, [0], base=-1.0)
    with raises_invalid(r"RopeConfig: layout = 'halves'; valid: 'interleaved', 'half'"):
        cmd.rope(x, [0], layout="halves")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bse'"):
        cmd.rope(x, [0], bse=5.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'windw'"):
        vkattn.AttentionConfig(windw=3)
    with raises_invalid(r"kv_cache: config\.capacity = 0"):
        cpu.kv_cache(n_kv_heads=1, head_dim=8)
    with raises_invalid(r"rope: config\.mrope\.sections = \{1, 1, 1\} \(sum 3\); valid: .* = 4"):
        cmd.rope(x, [[0, 0, 0]], mrope=vkattn.MRope(sections=[1, 1, 1]))
    with raises_invalid(r"rope: positions\.size\(\) = 3; valid: 3 x n_tokens = 3 x x\.shape\[0\] = 6"):
        cmd.rope(cpu.zeros((2, 1, 8)), [[0, 0, 0]], mrope=vkattn.MRope(sections=[2, 1, 1]))
    q = cpu.zeros((1, 1, 8))
    with raises_invalid(r"attention: config\.chunk = 0; valid: >= 1"):
        cmd.attention(q, q, q, q_positions=[0], chunk=0)
    with raises_invalid(r"AttentionConfig: window_type = 'both'; valid: 'trailing', 'symmetric'"):
        cmd.attention(q, q, q, q_positions=[0], window=4, window_type="both")
    with raises_invalid(r"attention: config\.query_temperature\.floor_scale = 0; valid: >= 1"):
        cmd.attention(q, q, q, q_positions=[0], query_temperature=vkattn.QueryTemperature(floor_scale=0))
    with raises_invalid(r"attention: config\.query_temperature\.scale = nan; valid: finite"):
        cmd.attention(q, q, q, q_positions=[0], query_temperature=vkattn.QueryTemperature(scale=float("nan")))


def test_mrope_positions_are_rows_of_three(cpu):
    """With mrope, positions are [n_tokens, 3] (t, h, w per token) and nothing else: a flat
    array could as well be three sections of n_tokens (transformers' position_ids are
    [3, batch, n_tokens]), so it is refused rather than read one way."""
    x = cpu.zeros((2, 1, 8))
    cmd = cpu.commands()
    mrope = vkattn.MRope(sections=[2, 1, 1])
    for flat in ([0, 0, 0, 1, 1, 1], np.arange(6, dtype=np.int32)):
        with raises_invalid(r"rope: positions\.shape = \(6,\); valid: \[n_tokens, 3\] with mrope"):
            cmd.rope(x, flat, mrope=mrope)
    with raises_invalid(r"rope: positions\.shape = \(3, 2\); valid: \[n_tokens, 3\] with mrope"):
        cmd.rope(x, np.zeros((3, 2), np.int32), mrope=mrope)
    # Without mrope, rows of three are no shorthand for three tokens' positions.
    with raises_invalid(r"rope: positions\.shape = \(1, 3\); valid: 1-D"):
        cmd.rope(cpu.zeros((3, 1, 8)), [[0, 1, 2]])
    assert cmd.stats()["ops"] == 0
    cmd.rope(x, [[0, 0, 0], [1, 1, 1]], mrope=mrope)
    assert cmd.stats()["ops"] == 1


def test_rotary_offsets_that_wrap(backend):
    """Even offsets near 2^64, whose sum with the rotary dims wraps, are refused by name with
    the row's bound (as an offset past the row is), rotary_dim 0 or set; nothing recorded.
    rope_frequencies names a head_dim below 2 and never prints a wrapped bound."""
    x = backend.zeros((2, 1, 16))
    cmd = backend.commands()
    for offset in (2**64 - 2, 2**64 - 6):
        for rotary_dim in (0, 4):
            match = rf"config\.rotary_offset = {offset}; valid: even in \[0, head_dim - 2 = 14\]"
            with raises_invalid("rope: " + match):
                cmd.rope(x, [0, 1], rotary_offset=offset, rotary_dim=rotary_dim)
            with raises_invalid("rope_frequencies: " + match):
                vkattn.rope_frequencies(16, rotary_offset=offset, rotary_dim=rotary_dim)
    assert cmd.stats()["ops"] == 0
    for head_dim in (0, 1):
        with raises_invalid(rf"rope_frequencies: head_dim = {head_dim}; valid: >= 2") as e:
            vkattn.rope_frequencies(head_dim)
        assert "18446744073709551615" not in str(e.value)


def test_symmetric_window_is_bidirectional(backend):
    """window_type="symmetric" looks both ways: with the default causal=True it is refused,
    saying to pass causal=False, by the attention ops over tensors and over a cache."""
    q = backend.zeros((2, 2, 8))
    cache = backend.kv_cache(n_kv_heads=2, head_dim=8, capacity=4, dtype="f32")
    cmd = backend.commands()
    cmd.kv_append(cache, q, q, [0, 1])
    match = r"config\.causal = true with config\.window_type = WindowType::symmetric; valid: false.*pass causal = false"
    with raises_invalid("attention: " + match):
        cmd.attention(q, q, q, q_positions=[0, 1], window=4, window_type="symmetric")
    with raises_invalid("attn_scores: " + match):
        cmd.attn_scores(q, q, q_positions=[0, 1], config=vkattn.AttentionConfig(window=4, window_type="symmetric"))
    with raises_invalid("attention: " + match):
        cmd.attention(q, cache, q_positions=[0, 1], window=4, window_type="symmetric")
    assert cmd.stats()["ops"] == 1
    cmd.attention(q, cache, q_positions=[0, 1], window=4, window_type="symmetric", causal=False)
    cmd.submit()


def test_attn_weighted_sum_over_a_cache_names_out(backend):
    """Over a cache V is no argument: a wrong out is named against the cache's v_head_dim."""
    cache = backend.kv_cache(n_kv_heads=1, head_dim=8, v_head_dim=4, capacity=4, dtype="f32")
    with raises_invalid(r"attn_weighted_sum: out\.shape\[2\] = 8; valid: cache v_head_dim = 4"):
        backend.commands().attn_weighted_sum(backend.zeros((1, 2, 4)), cache, backend.zeros((1, 2, 8)))


def test_kv_append_out_of_order(cpu):
    cache = cpu.kv_cache(n_kv_heads=1, head_dim=8, capacity=4)
    k = cpu.zeros((1, 1, 8))
    with raises_invalid(r"kv_append: positions\[0\] = 3"):
        cpu.commands().kv_append(cache, k, k, [3])
    assert cache.next_position() == 0


def test_device_errors_carry_their_code(cpu):
    with pytest.raises(vkattn.NoDeviceError) as e:
        vkattn.Backend("vulkan", device="no such device")
    assert e.value.code == vkattn.ErrorCode.no_device and isinstance(e.value, vkattn.Error)
    with pytest.raises(vkattn.OutOfMemoryError) as e:
        cpu.kv_cache(n_kv_heads=8, head_dim=256, capacity=2**28)  # 1 TiB
    assert e.value.code == vkattn.ErrorCode.out_of_memory
    assert e.value.op == "kv_cache" and "bytes" in e.value.message


def test_objects_of_another_backend(cpu, vulkan):
    with raises_invalid(r"rope: x"):
        vulkan.commands().rope(cpu.zeros((1, 1, 8)), [0])


def test_closed_backend(cpu):
    """A closed backend's tensors and lists stay valid as the C++ API promises: a recorded
    list still submits; what needs the backend itself raises InvalidArgument."""
    b = vkattn.Backend("cpu")
    x = b.tensor(np.ones((1, 1, 8), np.float32))
    cmd = b.commands()
    cmd.rope(x, [1])
    b.close()
    assert b.closed and "closed" in repr(b)
    cmd.submit()
    with raises_invalid(r"numpy: backend = closed; valid: an open Backend"):
        x.numpy()
    with raises_invalid(r"zeros: backend = closed"):
        b.zeros((1,))
    with raises_invalid(r"attention: backend = closed"):
        cmd.attention(x, x, x)  # its output would need the backend
    del b  # the last reference goes; the list and tensor are still fine
    cmd.submit()


def test_backend_kept_alive_by_its_tensors():
    x = vkattn.Backend("cpu").tensor(np.full((1, 1, 8), 2.0, np.float32))
    assert np.array_equal(x.numpy(), np.full((1, 1, 8), 2.0, np.float32))


def test_wrong_python_types_are_type_errors(cpu):
    with pytest.raises(TypeError):
        cpu.commands().rope(np.zeros((1, 1, 8), np.float32), [0])  # an array where a Tensor goes
    with pytest.raises(TypeError):
        cpu.kv_cache(n_kv_heads="two", head_dim=8, capacity=4)
    x = cpu.zeros((1, 1, 8))
    with pytest.raises(TypeError, match=r"attention\(\): mask must be a vkattn.Tensor or None, not ndarray"):
        cpu.commands().attention(x, x, x, mask=np.zeros((1, 1), np.float32))
    # Arguments vkattn converts itself: TypeErrors too, never a RuntimeError (which an
    # `except vkattn.Error` handler's base class would share).
    for call in (
        lambda: cpu.commands().attention(x, x, x, out=np.zeros((1, 1, 8), np.float32)),
        lambda: cpu.commands().attn_scores(x, x, scores=np.zeros((1, 1, 1), np.float32)),
        lambda: vkattn.Backend("cpu", submit_timeout_ms=-1.0),
    ):
        with pytest.raises(TypeError) as e:
            call()
        assert not isinstance(e.value, RuntimeError)
