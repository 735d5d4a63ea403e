#!/usr/bin/python3
"""The C API through Python's ctypes (the standard library only): loads the shared
libvkattn given on the command line, runs one attention on the Vulkan backend and on the
CPU backend, and compares them; checks that errors come back as status codes with the
message kept per thread. Exit status 0: passed; 1: failed; 77: no Vulkan device (skipped,
unless VKATTN_REQUIRE_VULKAN=1)."""
import ctypes as C
import os
import sys
import threading

lib = C.CDLL(sys.argv[1])

OK, INVALID_ARGUMENT, NO_DEVICE, UNSUPPORTED = 0, 1, 2, 7
BACKEND_CPU, BACKEND_VULKAN = 0, 1
DTYPE_F32 = 0


class AttentionTokens(C.Structure):  # vkattn_attention_tokens
    _fields_ = [("struct_size", C.c_uint32), ("reserved", C.c_uint32),
                ("q_positions", C.POINTER(C.c_int32)), ("n_q_positions", C.c_uint64),
                ("k_positions", C.POINTER(C.c_int32)), ("n_k_positions", C.c_uint64),
                ("q_seq_ids", C.POINTER(C.c_int32)), ("n_q_seq_ids", C.c_uint64),
                ("k_seq_ids", C.POINTER(C.c_int32)), ("n_k_seq_ids", C.c_uint64)]


handle = C.c_void_p
lib.vkattn_last_error_message.restype = C.c_char_p
lib.vkattn_version_string.restype = C.c_char_p
lib.vkattn_status_string.restype = C.c_char_p
lib.vkattn_backend_create.argtypes = [C.c_int32, C.c_void_p, C.POINTER(handle)]
lib.vkattn_backend_destroy.argtypes = [handle]
lib.vkattn_tensor_create.argtypes = [handle, C.POINTER(C.c_size_t), C.c_size_t, C.c_int32, C.POINTER(handle)]
lib.vkattn_tensor_destroy.argtypes = [handle]
lib.vkattn_upload_f32.argtypes = [handle, handle, C.POINTER(C.c_float), C.c_size_t]
lib.vkattn_download_f32.argtypes = [handle, handle, C.POINTER(C.c_float), C.c_size_t]
lib.vkattn_command_list_create.argtypes = [handle, C.c_void_p, C.POINTER(handle)]
lib.vkattn_command_list_destroy.argtypes = [handle]
lib.vkattn_submit_and_wait.argtypes = [handle]
lib.vkattn_attention_tokens_init.argtypes = [C.POINTER(AttentionTokens), C.c_size_t]
lib.vkattn_cmd_attention.argtypes = [handle, handle, handle, handle, handle, C.POINTER(AttentionTokens),
                                     C.c_void_p, handle]


def check(status):
    if status != OK:
        raise RuntimeError(f"{lib.vkattn_status_string(status).decode()}: "
                           f"{lib.vkattn_last_error_message().decode()}")


def floats(values):
    return (C.c_float * len(values))(*values)


def attention(backend, q, k, v, q_pos, T, H, HK, N, D):
    """out [T, H, D] of attention(q [T, H, D], k and v [N, HK, D]) with keys at 0..N-1."""
    tensors = []

    def tensor(shape, values=None):
        t = handle()
        check(lib.vkattn_tensor_create(backend, (C.c_size_t * 3)(*shape), 3, DTYPE_F32, C.byref(t)))
        tensors.append(t)
        if values is not None:
            check(lib.vkattn_upload_f32(backend, t, floats(values), len(values)))
        return t

    tq, tk, tv = tensor((T, H, D), q), tensor((N, HK, D), k), tensor((N, HK, D), v)
    out = tensor((T, H, D))
    tokens = AttentionTokens()
    check(lib.vkattn_attention_tokens_init(C.byref(tokens), C.sizeof(tokens)))
    positions = (C.c_int32 * T)(*q_pos)
    tokens.q_positions, tokens.n_q_positions = positions, T
    cmd = handle()
    check(lib.vkattn_command_list_create(backend, None, C.byref(cmd)))
    try:
        check(lib.vkattn_cmd_attention(cmd, tq, tk, tv, out, C.byref(tokens), None, None))
        check(lib.vkattn_submit_and_wait(cmd))
        result = (C.c_float * (T * H * D))()
        check(lib.vkattn_download_f32(backend, out, result, len(result)))
        return list(result)
    finally:
        lib.vkattn_command_list_destroy(cmd)
        for t in tensors:
            lib.vkattn_tensor_destroy(t)


def main():
    print("vkattn", lib.vkattn_version_string().decode(), "through ctypes")
    gpu, cpu = handle(), handle()
    status = lib.vkattn_backend_create(BACKEND_VULKAN, None, C.byref(gpu))
    if status in (NO_DEVICE, UNSUPPORTED):
        print("no Vulkan device:", lib.vkattn_last_error_message().decode(), file=sys.stderr)
        return 1 if os.environ.get("VKATTN_REQUIRE_VULKAN") == "1" else 77
    check(status)
    check(lib.vkattn_backend_create(BACKEND_CPU, None, C.byref(cpu)))
    failures = 0

    T, H, HK, N, D = 3, 4, 2, 9, 16
    q = [((i * 37) % 17 - 8) / 8.0 for i in range(T * H * D)]
    k = [((i * 11) % 13 - 6) / 6.0 for i in range(N * HK * D)]
    v = [((i * 7) % 19 - 9) / 9.0 for i in range(N * HK * D)]
    got = attention(gpu, q, k, v, [6, 7, 8], T, H, HK, N, D)
    want = attention(cpu, q, k, v, [6, 7, 8], T, H, HK, N, D)
    diff = max(abs(a - b) for a, b in zip(got, want))
    print(f"attention [3 tokens, 4 heads over 2, 9 keys, 16 dims]: max |Vulkan - CPU| = {diff:.2e}")
    if not diff <= 1e-4:
        failures += 1

    # A bad call returns a status and sets the message of its own thread only.
    bad = handle()
    status = lib.vkattn_tensor_create(cpu, (C.c_size_t * 1)(0), 1, DTYPE_F32, C.byref(bad))
    message = lib.vkattn_last_error_message().decode()
    seen = []
    thread = threading.Thread(target=lambda: seen.append(lib.vkattn_last_error_message().decode()))
    thread.start()
    thread.join()
    if status != INVALID_ARGUMENT or "shape[0] = 0" not in message or seen != [""]:
        print("error reporting:", status, repr(message), seen, file=sys.stderr)
        failures += 1

    lib.vkattn_backend_destroy(gpu)
    lib.vkattn_backend_destroy(cpu)
    print("ctypes:", "passed" if failures == 0 else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
