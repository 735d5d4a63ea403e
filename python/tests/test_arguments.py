"""The module's own argument handling: wrong types and out-of-range integers name the
parameter, the value and what is valid; shapes that could be read two ways are refused;
a with-block that raises drops its list at once; objects numpy and torch hand over in
forms the simple paths miss (bfloat16, bytearray, numpy 2's copy=)."""
import gc
import threading

import numpy as np
import pytest
import torch

import vkattn


def raises_invalid(match):
    return pytest.raises(vkattn.InvalidArgument, match=match)


def raises_type(match):
    return pytest.raises(TypeError, match=match)


def test_config_fields_name_themselves(cpu):
    x = cpu.zeros((1, 1, 8))
    cmd = cpu.commands()
    with raises_type(r"vkattn: AttentionConfig: window = 2\.5 \(float\); valid: an integer in \[0, \d+\], or None"):
        cmd.attention(x, x, x, window=2.5)
    with raises_type(r"AttentionConfig: window = True \(bool\)"):  # never read as 1
        vkattn.AttentionConfig(window=True)
    with raises_invalid(r"vkattn: KvCacheConfig: capacity = -1; valid: \[0, \d+\]"):
        cpu.kv_cache(n_kv_heads=1, head_dim=8, capacity=-1)
    with raises_type(r"AttentionConfig: path = 1 \(int\); valid: AttentionPath or one of 'automatic', 'fused'"):
        cmd.attention(x, x, x, path=1)
    with raises_type(r"vkattn: attention: config = \{'causal': False\} \(dict\); valid: an AttentionConfig or None"):
        cmd.attention(x, x, x, config={"causal": False})
    with raises_type(r"MRope: sections = \[16, 24\] \(list\); valid: a sequence of 3 integers"):
        vkattn.MRope(sections=[16, 24])
    with raises_type(r"KvCacheConfig: dtype = None \(NoneType\); valid: f32, f16"):  # not numpy's float64
        cpu.kv_cache(n_kv_heads=1, head_dim=8, capacity=4, dtype=None)
    with raises_type(r"zeros: dtype = None"):
        cpu.zeros((2,), dtype=None)
    with raises_type(r"attention: out = array\(.*\(ndarray\); valid: a vkattn.Tensor or None"):
        cmd.attention(x, x, x, out=np.zeros((1, 1, 8), np.float32))
    assert cmd.stats()["ops"] == 0
    # The right types still convert: numpy integers, floats for doubles, bools.
    c = vkattn.AttentionConfig(window=np.int64(4), scale=1, causal=False)
    assert (c.window, c.scale, c.causal) == (4, 1.0, False)


def test_values_of_their_own_type_only(cpu):
    """pybind11 alone would read None as False, 2.7 as 2 in a shape, True as 1.0 and 1e39 as
    inf in an f32 field: each is refused by name."""
    with raises_type(r"AttentionConfig: causal = None \(NoneType\); valid: True or False"):
        vkattn.AttentionConfig(causal=None)
    with raises_type(r"AttentionConfig: alibi = 1 \(int\); valid: True or False"):
        vkattn.AttentionConfig(alibi=1)
    assert vkattn.AttentionConfig(causal=np.bool_(False)).causal is False
    with raises_type(r"RopeConfig: base = True \(bool\); valid: a number"):
        vkattn.RopeConfig(base=True)
    with raises_invalid(r"AttentionConfig: sinks\[1\] = 1e\+39; valid: a number within float's range"):
        vkattn.AttentionConfig(sinks=[0.5, 1e39])
    with raises_type(r"zeros: shape\[0\] = 2\.7 \(float32\); valid: an integer"):
        cpu.zeros((np.float32(2.7), 8))
    with raises_invalid(r"zeros: shape\[1\] = -1; valid: \[0, \d+\]"):
        cpu.zeros((2, -1))
    with raises_type(r"MRope: sections\[2\] = True \(bool\); valid: an integer"):
        vkattn.MRope(sections=[16, 24, True])
    with raises_type(r"MRope: sections\[0\] = True \(bool_?\); valid: an integer"):
        vkattn.MRope(sections=[np.bool_(True), 24, 24])  # numpy 1.x would index it as 1
    with raises_type(r"commands: timestamps = None \(NoneType\); valid: True or False"):
        cpu.commands(timestamps=None)
    # None for a struct field, and a bool array of several values (pybind11's own texts).
    with raises_type(r"RopeConfig: yarn = None \(NoneType\); valid: a YarnParams"):
        vkattn.RopeConfig(yarn=None)
    with raises_type(r"KvCacheConfig: rope_config = None \(NoneType\); valid: a RopeConfig"):
        vkattn.KvCacheConfig(rope_config=None)
    with raises_type(r"AttentionConfig: causal = .*\(ndarray\); valid: True or False"):
        vkattn.AttentionConfig(causal=np.array([True, False]))
    cache = cpu.kv_cache(n_kv_heads=1, head_dim=8, capacity=4)
    k = cpu.zeros((1, 1, 8))
    with raises_type(r"kv_append: keep_last = 0 \(int\); valid: True or False"):
        cpu.commands().kv_append(cache, k, k, [0], keep_last=0)
    with raises_invalid(r"Backend: device = -1; valid: \[0, 4294967295\]"):  # not a name "-1"
        vkattn.Backend("cpu", device=-1)
    # An empty array is checked as any other (only an empty list means none).
    with raises_invalid(r"rope: positions\.dtype = float64; valid: integers"):
        cpu.commands().rope(cpu.zeros((2, 1, 8)), np.zeros((0,), np.float64))
    # Nor is a bool of an array type, nor an array's or tensor's own __index__ error.
    for value, shown in [(torch.tensor(True), r"tensor\(True\) \(Tensor\)"), (np.array(True), r"array\(True\) \(ndarray\)"),
                         (np.array([3]), r"array\(\[3\]\) \(ndarray\)"), (torch.tensor(3.5), r"tensor\(3\.5000\) \(Tensor\)")]:
        with raises_type(r"AttentionConfig: window = " + shown + r"; valid: an integer"):
            vkattn.AttentionConfig(window=value)
    assert vkattn.AttentionConfig(window=torch.tensor(3)).window == 3
    for dtype, shown in [(1, r"1 \(int\)"), (vkattn.RopeLayout.half, r"<RopeLayout\.half: 1> \(RopeLayout\)")]:
        with raises_type(r"zeros: dtype = " + shown + r"; valid: f32, f16, i32, q8_0, q4_0"):
            cpu.zeros((3,), dtype=dtype)
    # Objects only the library makes (pybind11 would make them without their C++ value).
    for cls in (vkattn.Tensor, vkattn.KvCache, vkattn.CommandList):
        with raises_type(r"cannot create|not safe"):
            cls.__new__(cls)
        with raises_type(r"cannot create"):
            cls()
    # A Backend that __new__ made without __init__ holds nothing: each use is a TypeError.
    unmade = vkattn.Backend.__new__(vkattn.Backend)
    for use in (repr, lambda b: b.limits, lambda b: b.kind, lambda b: b.closed, lambda b: b.close(),
                lambda b: b.commands(), lambda b: b.zeros((2,)), lambda b: b.__enter__()):
        with raises_type(r"Unable to cast"):
            use(unmade)
    # Still taken: numpy arrays and integers where sequences of numbers go.
    assert vkattn.AttentionConfig(sinks=np.array([0.5, 1.0], np.float32)).sinks == [0.5, 1.0]
    assert cpu.zeros(np.array([2, 8])).shape == (2, 8)


def test_unaligned_arrays_upload(cpu):
    """np.frombuffer at an odd offset is neither aligned nor copied by ascontiguousarray."""
    raw = np.arange(4, 40, dtype=np.float32).tobytes()
    x = np.frombuffer(b"\0" + raw, np.float32, count=8, offset=1).reshape(1, 2, 4)
    assert not x.flags["ALIGNED"]
    assert np.array_equal(cpu.tensor(x).numpy(), x)
    pos = np.frombuffer(b"\0" + np.arange(2, dtype=np.int32).tobytes(), np.int32, offset=1)
    cpu.commands().rope(cpu.tensor(np.ones((2, 1, 8), np.float32)), pos)


def test_nested_configs_edit_in_place():
    c = vkattn.RopeConfig(scaling="yarn", factor=4)
    c.yarn.beta_fast = 64
    assert c.yarn.beta_fast == 64
    kv = vkattn.KvCacheConfig(n_kv_heads=1, head_dim=8, capacity=4)
    kv.rope_config.base = 5e5
    assert kv.rope_config.base == 5e5


def test_backend_keywords_name_themselves():
    with raises_type(r"vkattn: Backend: force_staging = 'yes' \(str\); valid: True or False"):
        vkattn.Backend("cpu", force_staging="yes")
    with raises_invalid(r"vkattn: Backend: submit_timeout_ms = 4294967296; valid: \[0, 4294967295\]"):
        vkattn.Backend("cpu", submit_timeout_ms=2**32)
    with raises_type(r"Backend: device = True \(bool\); valid: an index \(int\), a name substring \(str\)"):
        vkattn.Backend("cpu", device=True)
    with raises_type(r"Backend: log_level = 2 \(int\); valid: LogLevel or one of"):
        vkattn.Backend("cpu", log_level=2)


def test_integers_past_int64_are_named(cpu):
    with raises_invalid(r"rope: positions\[1\] = 9223372036854775808; valid: \[0, 2\^31 - 1\]"):
        cpu.commands().rope(cpu.zeros((2, 1, 8)), [0, 2**63])
    with raises_invalid(r"rope: positions\.dtype = float64; valid: integers"):
        cpu.commands().rope(cpu.zeros((2, 1, 8)), [0, 1.5])


def test_method_integers_name_themselves(cpu):
    """Integer arguments of methods, not only config fields: vkattn's errors naming the call,
    the parameter and the value (pybind11's would be a TypeError listing the signature)."""
    c = cpu.kv_cache(n_kv_heads=1, head_dim=8, capacity=4, n_seqs=2)
    with raises_invalid(r"vkattn: next_position: seq = -1; valid: \[0, \d+\]"):
        c.next_position(-1)
    with raises_invalid(r"vkattn: truncate: position = 4294967296; valid: \[-2147483648, 2147483647\]"):
        c.truncate(2**32)
    with raises_invalid(r"vkattn: kv_copy_sequence: dst = -1; valid"):
        cpu.commands().kv_copy_sequence(c, 0, -1)
    with raises_invalid(r"vkattn: alibi_slopes: n_heads = -2; valid"):
        vkattn.alibi_slopes(-2)
    with raises_type(r"vkattn: reset: seq = True \(bool\); valid: an integer"):
        c.reset(True)
    with raises_type(r"vkattn: length: seq = 1\.0 \(float\); valid: an integer"):
        c.length(1.0)
    with raises_invalid(r"vkattn: reset: seq = 2; valid: \[0, n_seqs = 2\)"):  # the library's own range
        c.reset(2)
    # numpy integers, keywords and defaults still convert.
    assert c.next_position(np.int64(1)) == 0 and c.length(seq=np.uint8(1)) == 0 and c.next_position() == 0
    c.truncate(position=np.int32(0), seq=1)
    assert "seq: int = 0" in vkattn.KvCache.reset.__doc__


def test_strings_with_a_nul():
    """A name or path with a NUL is refused whole (the C calls would read less), and a
    refusal quoting a string keeps what follows a NUL in it."""
    with raises_invalid(r'Backend: device = "llvm\\0pipe"; valid: a string without NUL characters'):
        vkattn.Backend("cpu", device="llvm\0pipe")
    with raises_invalid(r"Backend: pipeline_cache_dir = "):
        vkattn.Backend("cpu", pipeline_cache_dir="cache\0dir")
    with raises_invalid(r"layout = .*; valid: "):
        vkattn.RopeConfig(layout="half\0")


def test_enum_options_out_of_range_are_refused():
    """A Python enum takes any integer: a backend is not made with one no name has (named
    by the keyword, as Python spells the values)."""
    with raises_invalid(r"vkattn: Backend: kernels = 7; valid: KernelShape\.automatic, cpu or gpu$"):
        vkattn.Backend("cpu", kernels=vkattn.KernelShape(7))
    with raises_invalid(r"Backend: log_level = 9; valid: LogLevel\.off"):
        vkattn.Backend("cpu", log_level=vkattn.LogLevel(9))
    with raises_invalid(r"Backend: matrix_units = 9"):
        vkattn.Backend("cpu", matrix_units=vkattn.MatrixUnits(9))
    with raises_invalid(r"Backend\.devices: matrix_units = 9; valid: MatrixUnits\.automatic"):
        vkattn.Backend.devices(matrix_units=vkattn.MatrixUnits(9))


def test_an_output_is_made_after_its_inputs_are_checked(cpu):
    """The output made for out=None takes its shape from q and k: from a wrong k, one too
    large to make, which is not the error to report."""
    q = cpu.zeros((256, 32, 128))
    cmd = cpu.commands()
    with raises_invalid(r"attn_scores: k\.shape = \[4194304\]; valid: rank 3"):
        cmd.attn_scores(q, cpu.zeros((2**22,)))  # scores [256, 32, 2^22]: 128 GiB
    # Past 2^40 elements, which no tensor may hold (the tensor's own error was raised).
    with raises_invalid(r"attn_scores: n_heads \(q\.shape\[1\]\) = 1023; valid: a multiple of n_kv_heads"):
        cmd.attn_scores(cpu.zeros((1100, 1023, 1)), cpu.zeros((2**20, 2, 1)), q_positions=np.zeros(1100, np.int32))
    cache = cpu.kv_cache(n_kv_heads=1, head_dim=8, capacity=2**20)
    with raises_invalid(r"attn_scores: q\.shape\[2\] = 16; valid: cache head_dim = 8"):
        cmd.attn_scores(cpu.zeros((2048, 64, 16)), cache, q_positions=np.zeros(2048, np.int32))
    with pytest.raises(vkattn.OutOfMemoryError, match=r"tensor"):  # right inputs: too large it is
        cmd.attn_scores(cpu.zeros((2048, 64, 8)), cache, q_positions=np.zeros(2048, np.int32))
    assert cmd.stats()["ops"] == 0


def test_torch_dtypes_numpy_lacks(cpu):
    t = torch.zeros((2, 3), dtype=torch.bfloat16)
    with raises_invalid(r"tensor: data\.dtype = torch\.bfloat16; valid: .*t\.float\(\)"):
        cpu.tensor(t)
    x = cpu.zeros((2, 3))
    with raises_invalid(r"upload: data\.dtype = torch\.bfloat16"):
        x.upload(t)
    with raises_invalid(r"rope: positions\.dtype = torch\.bfloat16"):
        cpu.commands().rope(cpu.zeros((2, 1, 8)), torch.zeros(2, dtype=torch.bfloat16))
    with raises_type(r"Sparse layout"):  # torch's own message, not a dtype it has
        cpu.tensor(torch.ones(3, 4).to_sparse())


def test_masked_arrays_hide_nothing(cpu):
    """A masked array's hidden values would be uploaded as if visible: refused while any
    are masked; with none masked, its data is taken."""
    a = np.ma.masked_array(np.arange(6, dtype=np.float32).reshape(2, 3), mask=[[0, 1, 0], [0, 0, 1]])
    with raises_invalid(r"tensor: data\.mask = 2 masked elements; valid: none \(fill them first"):
        cpu.tensor(a)
    x = cpu.zeros((2, 3))
    with raises_invalid(r"upload: data\.mask = 2 masked elements"):
        x.upload(a)
    with raises_invalid(r"rope: positions\.mask = 1 masked elements"):
        cpu.commands().rope(cpu.zeros((2, 1, 8)), np.ma.masked_array([0, 1], mask=[0, 1]))
    x.upload(a.filled(-1))
    np.testing.assert_array_equal(x.numpy(), [[0, -1, 2], [3, 4, -1]])
    x.upload(np.ma.masked_array(np.ones((2, 3), np.float32), mask=False))
    np.testing.assert_array_equal(x.numpy(), np.ones((2, 3)))


def test_set_tokens_rows_of_three_are_one_token_each(backend):
    """[m, 3] is m tokens' (t, h, w): for a 3-token list, [1, 3] would flatten to three
    positions, so it is refused rather than read as them; a list without M-RoPE refuses
    rows of three (h and w would be dropped) and takes t alone."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3, 2, 8)).astype(np.float32)
    mrope = vkattn.MRope(sections=[1, 1, 2])
    for kw in ({}, {"mrope": mrope}):
        x = backend.tensor(data)
        cmd = backend.commands()
        cmd.rope(x, [[0, 0, 0], [1, 1, 1], [2, 2, 2]] if kw else [0, 1, 2], **kw)
        assert cmd.n_tokens == 3
        with raises_invalid(r"set_tokens: positions\.shape = \(1, 3\); valid: \(3,\) or \(3, 3\)"):
            cmd.set_tokens(np.array([[6, 7, 8]]))
        rows = np.array([[5, 6, 7], [8, 9, 10], [11, 12, 13]], np.int32)
        if kw:
            cmd.set_tokens(rows)
        else:
            with raises_invalid(r"set_tokens: positions\.size\(\) = 9 \(t, h, w per token\).*no rope op with config\.mrope"):
                cmd.set_tokens(rows)
            cmd.set_tokens(rows[:, 0])
        x.upload(data)
        cmd.submit()
        want = backend.tensor(data)
        with backend.commands() as ref:
            ref.rope(want, rows if kw else rows[:, 0], **kw)
        np.testing.assert_array_equal(x.numpy(), want.numpy())
    assert backend.commands().n_tokens == 0


@pytest.mark.parametrize("keep_error", [False, True])
def test_with_block_that_raises_drops_its_list(backend, keep_error):
    """A kept exception's traceback holds the list; the cache must not count the append
    that never ran until it goes."""
    cache = backend.kv_cache(n_kv_heads=1, head_dim=8, capacity=8, dtype="f32")
    k = backend.tensor(np.ones((1, 1, 8), np.float32))
    kept = []
    try:
        with backend.commands() as cmd:
            cmd.kv_append(cache, k, k, [0])
            assert cache.next_position() == 1
            raise KeyError("sampler failed")
    except KeyError as e:
        if keep_error:
            kept.append(e)
    assert cache.next_position() == 0 and list(cache.slot_positions()[:2]) == [-1, -1]
    with raises_invalid(r"submit: this = a list whose with-block raised \(discarded\)"):
        cmd.submit()
    with raises_invalid(r"stats: this = a list whose with-block raised"):
        cmd.stats()
    with backend.commands() as again:  # position 0 is free again, and the next list runs
        again.kv_append(cache, k, k, [0])
    assert cache.next_position() == 1 and cache.slot_positions()[0] == 0
    kept.clear()
    gc.collect()


def test_with_block_raising_while_another_thread_is_inside(cpu):
    """Misuse, but no crash: a with-block raises while another thread records into the same
    list; the list is dropped once that thread's call returns, never under it."""
    x = cpu.tensor(np.ones((256, 8, 64), np.float32))
    y = cpu.zeros((256, 8, 64))
    for _ in range(100):
        cmd = cpu.commands()
        stop, other = [], []

        def work():
            while not stop:
                try:
                    cmd.copy(x, y)
                except vkattn.InvalidArgument as e:
                    if "discarded" not in str(e) and "in use by another thread" not in str(e):
                        other.append(e)

        t = threading.Thread(target=work)
        t.start()
        with pytest.raises(KeyError):
            with cmd:
                raise KeyError("block raised")
        stop.append(True)
        t.join()
        assert other == []
        with raises_invalid(r"copy: this = a list whose with-block raised"):
            cmd.copy(x, y)


def test_buffers_and_numpy_protocols(backend):
    cache = backend.kv_cache(n_kv_heads=1, head_dim=8, capacity=4, dtype="f32")
    with backend.commands() as cmd:
        k = backend.tensor(np.full((1, 1, 8), 3.0, np.float32))
        cmd.kv_append(cache, k, k, [0])
    saved = backend.save_cache(cache)
    for data in (bytearray(saved), memoryview(saved)):
        other = backend.kv_cache(n_kv_heads=1, head_dim=8, capacity=4, dtype="f32")
        backend.restore_cache(other, data)
        assert other.next_position() == 1
    with raises_type(r"restore_cache: data = 'x' \(str\); valid: bytes"):
        backend.restore_cache(cache, "x")
    t = backend.tensor(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(t.__array__(copy=True), np.arange(4))
    with pytest.raises(ValueError, match="copy=False"):
        t.__array__(copy=False)


def test_signatures_name_python_classes():
    for name in ("tensor", "zeros", "kv_cache", "save_cache", "restore_cache", "commands"):
        doc = getattr(vkattn.Backend, name).__doc__
        assert "vkattn::" not in doc, doc
