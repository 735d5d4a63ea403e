"""Backend(log=...): messages reach a Python callable on the main thread, in order, after
the call that logged them returns; a callable that raises goes to sys.unraisablehook and
does not stop later messages; anything but a callable is a TypeError naming it."""
import os
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

import vkattn


def wait_for(cond):
    # The callback runs at the interpreter's next check for pending calls: soon, not at once.
    for _ in range(2000):
        if cond():
            return True
        time.sleep(0.001)
    return cond()


def vulkan_backend(**kw):
    kw.setdefault("pipeline_cache_dir", "")
    try:
        return vkattn.Backend("vulkan", validation=False, **kw)
    except vkattn.NoDeviceError as e:
        if os.environ.get("VKATTN_REQUIRE_VULKAN") == "1":
            pytest.fail(f"no Vulkan device, and VKATTN_REQUIRE_VULKAN=1: {e}")
        pytest.skip(f"no Vulkan device: {e}")


def test_messages_reach_the_callback_on_the_main_thread():
    got = []
    main = threading.get_ident()
    cb = lambda level, message: got.append((level, message, threading.get_ident()))
    made = []
    # Made on another thread: the messages still come on the main one.
    worker = threading.Thread(target=lambda: made.append(vulkan_backend(log=cb, log_level="info")))
    worker.start()
    worker.join()
    assert made, "the backend was not made"
    with made[0]:
        assert wait_for(lambda: any(m.startswith("device ") for _, m, _ in got)), got
    assert all(isinstance(level, vkattn.LogLevel) and isinstance(m, str) for level, m, _ in got)
    assert all(thread == main for _, _, thread in got)
    assert all(level == vkattn.LogLevel.info for level, _, _ in got)


def test_a_pipeline_build_is_logged_in_order():
    got = []
    with tempfile.TemporaryDirectory() as d:  # an empty pipeline cache: the build happens
        with vulkan_backend(pipeline_cache_dir=d, log_level="info", log=lambda level, m: got.append(m)) as b:
            x = b.tensor(np.ones((1, 1, 2), np.float32))
            with b.commands() as cmd:
                cmd.rope(x, [3])
            assert wait_for(lambda: any(m.startswith("built pipeline") for m in got)), got
    first_build = next(i for i, m in enumerate(got) if m.startswith("built pipeline"))
    assert first_build > 0 and got[0].startswith("device ")  # the order they were logged in


def test_a_raising_callback_goes_to_the_unraisable_hook():
    seen, got = [], []

    def cb(level, message):
        got.append(message)
        raise RuntimeError("from the callback")

    old = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u)
    try:
        b = vulkan_backend(log=cb, log_level="info")
        with b:
            assert wait_for(lambda: len(seen) >= 1 and len(got) >= 1)
    finally:
        sys.unraisablehook = old
    assert isinstance(seen[0].exc_value, RuntimeError)
    assert len(got) == len(seen)  # each message delivered, each failure reported


def test_a_message_that_is_not_utf8_is_delivered():
    """A path that is not UTF-8 (bytes, or str with surrogate escapes) reaches the messages
    as its bytes: each is delivered, invalid bytes replaced."""
    for path in (b"/proc/version/\xff\xfe", os.fsdecode(b"/proc/version/\xff\xfe")):
        got = []
        vulkan_backend(pipeline_cache_dir=path, log=lambda level, m: got.append(m), log_level="info").close()
        assert wait_for(lambda: any("pipeline cache /proc/version/\ufffd\ufffd/" in m for m in got))  # not written


def test_not_a_callable_is_a_type_error():
    with pytest.raises(TypeError, match=r"vkattn: Backend: log = 'stderr' \(str\); valid: a callable"):
        vkattn.Backend("cpu", log="stderr")
    vkattn.Backend("cpu", log=None).close()  # None: the default, stderr
