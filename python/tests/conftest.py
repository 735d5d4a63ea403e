"""Backends for the tests: one CPU reference backend and one Vulkan backend (validation
layer on) for the whole session, so that lavapipe builds each kernel's pipeline once (in
seconds) and every test after reuses it; the pipeline cache is the C++ tests' own. A test
fails if the validation layer reports anything while it runs. Without a Vulkan device the
Vulkan tests are skipped, unless VKATTN_REQUIRE_VULKAN=1 (CI), where they fail."""
import os
import tempfile

import pytest

import vkattn

CACHE_DIR = os.path.join(tempfile.gettempdir(), "vkattn-test-pipeline-cache")


@pytest.fixture(scope="session")
def cpu():
    with vkattn.Backend("cpu") as b:
        yield b


@pytest.fixture(scope="session")
def vulkan():
    try:
        # VKATTN_TEST_VALIDATION=0: without the layer (tests/support/backends.hpp says when).
        validation = os.environ.get("VKATTN_TEST_VALIDATION") != "0"
        # Submissions may take 10 minutes: lavapipe compiles a pipeline inside the first
        # submission using it (seconds each; more on a busy machine with a cold cache).
        b = vkattn.Backend("vulkan", validation=validation, pipeline_cache_dir=CACHE_DIR, submit_timeout_ms=600000)
    except vkattn.NoDeviceError as e:
        if os.environ.get("VKATTN_REQUIRE_VULKAN") == "1":
            pytest.fail(f"no Vulkan device, and VKATTN_REQUIRE_VULKAN=1: {e}")
        pytest.skip(f"no Vulkan device: {e}")
    with b:
        yield b


@pytest.fixture(params=["cpu", "vulkan"])
def backend(request):
    b = request.getfixturevalue(request.param)
    seen = len(b.validation_messages())
    yield b
    assert b.validation_messages()[seen:] == []
