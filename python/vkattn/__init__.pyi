# Type stub of vkattn (the module vkattn._vkattn re-exported). Units, defaults and ranges
# are those of the C++ headers (include/vkattn/types.hpp, kv_cache.hpp, command_list.hpp).
import os
from enum import Enum
from typing import Any, Callable, Optional, Sequence, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str

class DType(Enum):
    f32: DType
    f16: DType
    i32: DType
    q8_0: DType
    q4_0: DType

class BackendKind(Enum):
    cpu: BackendKind
    vulkan: BackendKind

class RopeLayout(Enum):
    interleaved: RopeLayout
    half: RopeLayout

class RopeScaling(Enum):
    none: RopeScaling
    linear: RopeScaling
    ntk: RopeScaling
    dynamic_ntk: RopeScaling
    yarn: RopeScaling
    llama3: RopeScaling
    factors: RopeScaling

class AttentionPath(Enum):
    automatic: AttentionPath
    fused: AttentionPath
    three_stages: AttentionPath

class AttentionPrecision(Enum):
    f32: AttentionPrecision
    f16_products: AttentionPrecision

class MRopeLayout(Enum):
    contiguous: MRopeLayout
    interleaved: MRopeLayout

class WindowType(Enum):
    trailing: WindowType
    symmetric: WindowType

class SoftcapOrder(Enum):
    scale_then_cap: SoftcapOrder
    cap_then_scale: SoftcapOrder

class KvRope(Enum):
    stored: KvRope
    on_read: KvRope

class KernelShape(Enum):
    automatic: KernelShape
    cpu: KernelShape
    gpu: KernelShape

class MatrixUnits(Enum):
    automatic: MatrixUnits
    off: MatrixUnits
    on: MatrixUnits
    standin: MatrixUnits

class LogLevel(Enum):
    off: LogLevel
    error: LogLevel
    warning: LogLevel
    info: LogLevel

class ErrorCode(Enum):
    vulkan_call_failed: ErrorCode
    no_device: ErrorCode
    device_lost: ErrorCode
    out_of_memory: ErrorCode
    timeout: ErrorCode
    unsupported: ErrorCode

class InvalidArgument(ValueError):
    param: str
    op: str  # since 0.12

class Error(RuntimeError):
    code: ErrorCode
    vk_result: int
    call: str
    op: str
    message: str

class VulkanError(Error): ...
class NoDeviceError(Error): ...
class DeviceLostError(Error): ...
class OutOfMemoryError(Error, MemoryError): ...
class DeviceTimeoutError(Error): ...
class UnsupportedError(Error): ...

DTypeLike = Union[DType, str, np.dtype, type]
ArrayLike = Union[npt.ArrayLike, Any]  # float32 / float16 (int32) numpy arrays, torch CPU tensors
Ints = Union[Sequence[int], npt.NDArray[np.integer], Any, None]  # positions, sequence ids

class YarnParams:
    beta_fast: float  # default 32
    beta_slow: float  # default 1; < beta_fast
    mscale: float  # default 0 = unused
    mscale_all_dim: float  # default 0 = unused
    truncate: bool  # default True
    def __init__(self, *, beta_fast: float = ..., beta_slow: float = ..., mscale: float = ...,
                 mscale_all_dim: float = ..., truncate: bool = ...) -> None: ...

class Llama3Params:
    low_freq_factor: float  # default 1
    high_freq_factor: float  # default 4; >= low_freq_factor
    def __init__(self, *, low_freq_factor: float = ..., high_freq_factor: float = ...) -> None: ...

class MRope:
    sections: list[int]  # rotary pairs per position (t, h, w); add up to rotary_dim / 2
    layout: Union[MRopeLayout, str]  # default "contiguous"
    def __init__(self, *, sections: Sequence[int] = ..., layout: Union[MRopeLayout, str] = ...) -> None: ...

class RopeConfig:
    layout: Union[RopeLayout, str]  # default "half" (Hugging Face)
    rotary_dim: int  # even; default 0 = head_dim - rotary_offset
    rotary_offset: int  # even, <= head_dim - 2: dims [rotary_offset, rotary_offset + rotary_dim) rotate; default 0
    base: float  # default 10000
    scaling: Union[RopeScaling, str]  # default "none"
    factor: float  # default 1
    original_context: int  # dynamic_ntk, yarn, llama3; default 0
    sequence_length: int  # dynamic_ntk; default 0 = 1 + largest position
    yarn: YarnParams
    llama3: Llama3Params
    freq_factors: list[float]  # factors: rotary_dim / 2 values
    attention_factor: Optional[float]  # default None (yarn: 0.1 ln(factor) + 1, else 1)
    mrope: Optional[MRope]  # default None; positions then [n_tokens, 3] (t, h, w), never flat
    def __init__(self, *, layout: Union[RopeLayout, str] = ..., rotary_dim: int = ..., rotary_offset: int = ...,
                 base: float = ...,
                 scaling: Union[RopeScaling, str] = ..., factor: float = ..., original_context: int = ...,
                 sequence_length: int = ..., yarn: YarnParams = ..., llama3: Llama3Params = ...,
                 freq_factors: Sequence[float] = ..., attention_factor: Optional[float] = ...,
                 mrope: Optional[MRope] = ...) -> None: ...

class QueryTemperature:
    floor_scale: int  # default 8192; >= 1
    scale: float  # default 0.1; finite
    offset: int  # default 1 (Llama 4); < 2^31
    # attn_scale: scale's name in Llama 4's config.json (an alias; not both).
    def __init__(self, *, floor_scale: int = ..., scale: float = ..., offset: int = ...,
                 attn_scale: float = ...) -> None: ...

class AttentionConfig:
    scale: Optional[float]  # default None = 1/sqrt(head_dim)
    causal: bool  # default True; False with window_type "symmetric" (True with it is refused)
    window: Optional[int]  # default None; >= 1
    window_type: Union[WindowType, str]  # default "trailing"; "symmetric": |pos_t - pos_j| <= window // 2
    chunk: Optional[int]  # default None; >= 1: keys in the query's chunk only
    query_temperature: Optional[QueryTemperature]  # default None
    softcap: Optional[float]  # default None; > 0
    softcap_order: Union[SoftcapOrder, str]  # default "scale_then_cap"
    alibi: bool  # default False
    alibi_slopes: list[float]  # default []; per head, implies ALiBi
    sinks: list[float]  # default []; per head sink logits
    path: Union[AttentionPath, str]  # default "automatic"
    precision: Union[AttentionPrecision, str]  # default "f32"; "f16_products": matrix units' rounding
    mask_keys: int  # default 0; a promise: each mask row leaves at most this many keys (not -inf)
    def __init__(self, *, scale: Optional[float] = ..., causal: bool = ..., window: Optional[int] = ...,
                 window_type: Union[WindowType, str] = ..., chunk: Optional[int] = ...,
                 query_temperature: Optional[QueryTemperature] = ...,
                 softcap: Optional[float] = ..., softcap_order: Union[SoftcapOrder, str] = ...,
                 alibi: bool = ..., alibi_slopes: Sequence[float] = ..., sinks: Sequence[float] = ...,
                 path: Union[AttentionPath, str] = ...,
                 precision: Union[AttentionPrecision, str] = ..., mask_keys: int = ...) -> None: ...

class KvCacheConfig:
    n_seqs: int  # default 1
    n_kv_heads: int  # required
    head_dim: int  # required, [1, 576]
    capacity: int  # required, (n_sinks, 2^30]
    dtype: DTypeLike  # default f16
    n_sinks: int  # default 0
    rope: Union[KvRope, str]  # default "stored"
    rope_config: RopeConfig
    v_head_dim: int  # default 0 = head_dim
    latent: bool  # default False: V is the first v_head_dim dims of each key row
    paged: bool  # default False: K and V in a pool of blocks shared by the sequences
    block_size: int  # paged: default 16, a power of two
    n_blocks: int  # paged: required
    def __init__(self, *, n_seqs: int = ..., n_kv_heads: int = ..., head_dim: int = ..., capacity: int = ...,
                 dtype: DTypeLike = ..., n_sinks: int = ..., rope: Union[KvRope, str] = ...,
                 rope_config: RopeConfig = ..., v_head_dim: int = ..., latent: bool = ..., paged: bool = ...,
                 block_size: int = ..., n_blocks: int = ...) -> None: ...

class DeviceLimits:
    subgroup_size: int
    max_shared_memory: int
    max_workgroup_invocations: int
    max_storage_buffer_range: int
    max_storage_buffers: int
    max_texel_buffer_elements: int
    device_local_bytes: int
    timestamps: bool
    unified_memory: bool
    compute_units: int
    matrix_units: bool  # f16_products attention runs on the matrix units
    matrix_standin: bool  # the matrix kernels run as plain GLSL (MatrixUnits.standin)
    def __init__(self, **fields: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class DeviceInfo:
    index: int
    name: str
    type: str
    api_version: str
    driver: str
    limits: DeviceLimits
    rejected: str
    chosen: bool
    matrix_shapes: list[MatrixShape]
    matrix_note: str  # why limits.matrix_units is False; "" when it is True

class MatrixShape:
    m: int
    n: int
    k: int
    a: str
    b: str
    c: str
    result: str
    scope: str
    saturating: bool

class Tensor:
    shape: tuple[int, ...]
    dtype: DType
    numel: int
    nbytes: int
    def numpy(self) -> np.ndarray: ...
    def upload(self, data: ArrayLike) -> None: ...
    def __array__(self, dtype: Any = ..., copy: Optional[bool] = ...) -> np.ndarray: ...

class KvCache:
    config: KvCacheConfig
    nbytes: int
    def next_position(self, seq: int = 0) -> int: ...
    def length(self, seq: int = 0) -> int: ...
    def slot_positions(self, seq: int = 0) -> npt.NDArray[np.int32]: ...
    def slot(self, position: int) -> int: ...
    def reset(self, seq: int = 0) -> None: ...
    def truncate(self, position: int, seq: int = 0) -> None: ...
    # A paged cache's pool (InvalidArgument for a ring cache).
    free_blocks: int
    def block_table(self, seq: int = 0) -> npt.NDArray[np.int32]: ...
    def block_refs(self) -> npt.NDArray[np.int32]: ...
    def blocks_to_append(self, n_tokens: int, seq: int = 0) -> int: ...

class CommandList:
    def __enter__(self) -> CommandList: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def copy(self, src: Tensor, dst: Tensor) -> None: ...
    # rope(x, positions, ...) or rope(q, k, positions, ...); keywords: RopeConfig's fields.
    # positions: n_tokens integers, or [n_tokens, 3] (t, h, w per token) with mrope.
    def rope(self, x: Tensor, *args: Any, config: Optional[RopeConfig] = ..., **fields: Any) -> None: ...
    @overload
    def kv_append(self, cache: KvCache, k: Tensor, v: Optional[Tensor], positions: Ints, seq_ids: Ints = ...,
                  *, keep_last: bool = ...) -> None: ...
    @overload  # K alone: a latent cache's (the same as v=None)
    def kv_append(self, cache: KvCache, k: Tensor, positions: Ints, seq_ids: Ints = ...,
                  *, keep_last: bool = ...) -> None: ...
    def kv_copy_sequence(self, cache: KvCache, src: int, dst: int) -> None: ...
    # The attention ops take k (and v) Tensors, or a KvCache in their place (named cache); keywords:
    # q_positions, k_positions, q_seq_ids, k_seq_ids (Ints; over a KvCache no k_ ones),
    # mask (Tensor), config, and AttentionConfig's fields; attn_weighted_sum takes none
    # over Tensors, q_positions and q_seq_ids over a KvCache. Outputs are made when not
    # given, and returned.
    @overload
    def attn_scores(self, q: Tensor, k: Tensor, scores: Optional[Tensor] = ..., **kw: Any) -> Tensor: ...
    @overload
    def attn_scores(self, q: Tensor, cache: KvCache, scores: Optional[Tensor] = ..., **kw: Any) -> Tensor: ...
    def attn_softmax(self, scores: Tensor, probs: Optional[Tensor] = ..., *,
                     config: Optional[AttentionConfig] = ..., **fields: Any) -> Tensor: ...
    @overload
    def attn_weighted_sum(self, probs: Tensor, v: Tensor, out: Optional[Tensor] = ...) -> Tensor: ...
    @overload
    def attn_weighted_sum(self, probs: Tensor, cache: KvCache, out: Optional[Tensor] = ..., *,
                          q_positions: Ints = ..., q_seq_ids: Ints = ...) -> Tensor: ...
    def attention(self, q: Tensor, *args: Any, **kw: Any) -> Tensor: ...
    def submit(self) -> None: ...
    # True once the submission a timed-out submit() left running has finished (or none runs).
    def wait(self, timeout: float | None = None) -> bool: ...
    # positions: n_tokens integers, or [n_tokens, 3] (t, h, w per token).
    def set_tokens(self, positions: Ints, seq_ids: Ints | None = None, mrope_positions: Ints | None = None) -> None: ...
    n_tokens: int  # what set_tokens takes; 0 when no op takes tokens
    def timings(self) -> list[tuple[str, float]]: ...
    # ops, barriers, submits, texel_reads, encodings: int; attention: a list of
    # {"kernel": str, "splits": int, "precision": str, "sparse": bool}, one per attention op
    def stats(self) -> dict[str, Any]: ...

class Backend:
    kind: BackendKind
    device_name: str
    limits: DeviceLimits
    closed: bool
    def __init__(self, kind: Union[BackendKind, str] = "vulkan", device: Union[int, str, None] = None,
                 validation: Optional[bool] = None, *, kernels: Union[KernelShape, str, None] = ...,
                 force_staging: bool = ..., pipeline_cache_dir: Union[str, bytes, os.PathLike, None] = ...,
                 submit_timeout_ms: int = ..., log_level: Union[LogLevel, str, None] = ...,
                 log: Optional[Callable[[LogLevel, str], None]] = ...,
                 cap_limits: Optional[DeviceLimits] = ...,
                 matrix_units: Union[MatrixUnits, str, None] = ...) -> None: ...
    def __enter__(self) -> Backend: ...
    def __exit__(self, *exc: Any) -> None: ...
    @staticmethod
    def devices(device: Union[int, str, None] = None, validation: Optional[bool] = None, *,
                matrix_units: Union[MatrixUnits, str, None] = None) -> list[DeviceInfo]: ...
    def tensor(self, data: ArrayLike, dtype: Optional[DTypeLike] = None) -> Tensor: ...
    def zeros(self, shape: Sequence[int], dtype: DTypeLike = "f32") -> Tensor: ...
    def upload(self, tensor: Tensor, data: ArrayLike) -> None: ...
    def download(self, tensor: Tensor) -> np.ndarray: ...
    def kv_cache(self, *, config: Optional[KvCacheConfig] = ..., **fields: Any) -> KvCache: ...
    def save_cache(self, cache: KvCache) -> bytes: ...
    def restore_cache(self, cache: KvCache, data: Union[bytes, bytearray, memoryview]) -> None: ...
    def commands(self, timestamps: bool = False) -> CommandList: ...
    def validation_messages(self) -> list[str]: ...
    def close(self) -> None: ...

def devices(device: Union[int, str, None] = None, validation: Optional[bool] = None, *,
            matrix_units: Union[MatrixUnits, str, None] = None) -> list[DeviceInfo]: ...
def alibi_slopes(n_heads: int) -> npt.NDArray[np.float32]: ...
def rope_frequencies(head_dim: int, max_position: int = 0, *, config: Optional[RopeConfig] = ...,
                     **fields: Any) -> tuple[npt.NDArray[np.float64], float]: ...
def spec_minimum_limits() -> DeviceLimits: ...
