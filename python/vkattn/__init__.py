"""vkattn: the attention path of transformer models (RoPE, attention, a ring-buffer KV
cache) on any Vulkan GPU, or on the CPU reference, from numpy and PyTorch.

    import numpy as np, vkattn
    gpu = vkattn.Backend("vulkan")                       # or "cpu", the reference
    q = gpu.tensor(np.random.randn(1, 8, 64).astype(np.float32))
    k = gpu.tensor(np.random.randn(10, 2, 64).astype(np.float16))
    v = gpu.tensor(np.random.randn(10, 2, 64).astype(np.float16))
    with gpu.commands() as cmd:                          # submits at the end of the block
        out = cmd.attention(q, k, v, q_positions=[9])    # causal, GQA 8:2
    print(out.numpy().shape)                             # (1, 8, 64) float32

Bad arguments raise vkattn.InvalidArgument (a ValueError) naming the op, the parameter,
its value and the valid range; device failures raise a vkattn.Error subclass with .code.
The stub __init__.pyi has every signature; docs/python.md has the rules.
"""
from ._vkattn import (  # noqa: F401
    AttentionConfig,
    AttentionPath,
    AttentionPrecision,
    Backend,
    BackendKind,
    CommandList,
    DeviceInfo,
    DeviceLimits,
    DeviceLostError,
    DeviceTimeoutError,
    DType,
    Error,
    ErrorCode,
    InvalidArgument,
    KernelShape,
    KvCache,
    KvCacheConfig,
    KvRope,
    Llama3Params,
    LogLevel,
    MatrixShape,
    MatrixUnits,
    MRope,
    MRopeLayout,
    NoDeviceError,
    OutOfMemoryError,
    QueryTemperature,
    RopeConfig,
    RopeLayout,
    RopeScaling,
    SoftcapOrder,
    Tensor,
    UnsupportedError,
    VulkanError,
    WindowType,
    YarnParams,
    __version__,
    alibi_slopes,
    rope_frequencies,
    spec_minimum_limits,
)


def devices(device=None, validation=None, *, matrix_units=None):
    """Every Vulkan device, the one Backend("vulkan", device) would choose marked .chosen;
    matrix_units as Backend's decides what each reports in limits.matrix_units and matrix_note."""
    return Backend.devices(device, validation, matrix_units=matrix_units)


__all__ = [name for name in dir() if not name.startswith("_")] + ["__version__"]
