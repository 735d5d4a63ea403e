/* vkattn's C API: plain C11, for C programs and for other languages through their FFI
 * (Rust, Go, C#, Zig, Python ctypes/cffi). A thin layer over the C++ API (vkattn.hpp):
 * the same ops, the same checks, the same error messages. docs/c-api.md has a tour.
 *
 * Conventions
 * - Every function returns a vkattn_status (VKATTN_OK = 0), except the destroy functions
 *   and vkattn_free (void; NULL does nothing), vkattn_status_string, vkattn_last_error_message
 *   (the last failure on the calling thread, explained), the two version functions and
 *   the names of values (vkattn_attention_kernel_name, vkattn_dtype_name).
 * - No C++ exception crosses this interface, and no bad argument crashes: a NULL handle or
 *   a NULL pointer is VKATTN_ERROR_INVALID_ARGUMENT, unless the parameter is marked
 *   "optional" (NULL then means: defaults, or none). An array is a pointer and a count;
 *   (NULL, 0) is an empty array. A create function that fails sets its result to NULL.
 * - Handles (vkattn_backend, vkattn_tensor, vkattn_command_list, vkattn_kv_cache,
 *   vkattn_device_list) are opaque. Tensors, caches and command lists stay valid after the
 *   backend that made them is destroyed (to record, submit and destroy; downloads and
 *   vkattn_save_cache need the backend). A backend handle, and everything made from it,
 *   is used from one thread at a time.
 * - Strings the library returns are owned by it: a handle's strings live as long as the
 *   handle (a command list's timing names until its next submit), the last error message
 *   until the next vkattn call on the same thread. Memory it returns otherwise
 *   (vkattn_save_cache) is the caller's, released with vkattn_free.
 * - Arrays passed to an op are copied when it is recorded: they need not outlive the call.
 *
 * ABI (binary compatibility across versions)
 * - Enum values are fixed integers, never renumbered; new values are appended.
 * - Structs start with uint32_t struct_size. Fill an input struct with its
 *   vkattn_*_init(&s, sizeof s) function, then change the fields you need. New fields are
 *   only ever appended, whole 8-byte groups at a time, and zero means the old behaviour
 *   (except vkattn_device_options.matrix_units: its old behaviour is -1; use the _init
 *   function). A struct from an older header (smaller struct_size) gets the defaults of
 *   the fields it lacks; one from a newer header is accepted when the fields this library
 *   does not know are zero. Output structs take their size as an argument and are filled
 *   up to it. No struct has bool, enum-typed or platform-dependent fields, or #if.
 * - Functions are only ever added. vkattn_version_number() gives the library's version,
 *   VKATTN_VERSION_NUMBER the header's; every addition since 0.1 kept these rules.
 */
#ifndef VKATTN_VKATTN_H
#define VKATTN_VKATTN_H

#include <stddef.h>
#include <stdint.h>

#include "vkattn/export.h"
#include "vkattn/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and errors ---- */

typedef int32_t vkattn_status;
enum {
  VKATTN_OK = 0,
  VKATTN_ERROR_INVALID_ARGUMENT = 1,     /* a parameter outside its valid range; nothing was done */
  VKATTN_ERROR_NO_DEVICE = 2,            /* no usable Vulkan device (reasons in the message) */
  VKATTN_ERROR_OUT_OF_DEVICE_MEMORY = 3, /* a device allocation failed or a size passes a device limit */
  VKATTN_ERROR_OUT_OF_HOST_MEMORY = 4,   /* a host allocation failed */
  VKATTN_ERROR_DEVICE_LOST = 5,          /* the device must be recreated: destroy the backend */
  VKATTN_ERROR_TIMEOUT = 6,              /* a submission did not finish in submit_timeout_ms */
  VKATTN_ERROR_UNSUPPORTED = 7,          /* the device or installation lacks what was asked for */
  VKATTN_ERROR_VULKAN = 8,               /* another Vulkan call failed (named in the message) */
  VKATTN_ERROR_INTERNAL = 9              /* a bug in vkattn: please report the message */
};

/* The constant's name without VKATTN_ ("OK", "ERROR_INVALID_ARGUMENT", ...); never NULL. */
VKATTN_API const char* vkattn_status_string(vkattn_status status);
/* Why the last call on this thread failed: the text the C++ exception carries, such as
 * "vkattn: rope: positions[1] = -3; valid: [0, 2^31 - 1]". "" after a call that succeeded
 * (every call that returns a status clears it first; the _destroy functions, vkattn_free
 * and the string functions leave it, so that a cleanup path keeps it). Never NULL. Use
 * the status to detect failure, the message only to explain it. */
VKATTN_API const char* vkattn_last_error_message(void);

/* The library's version, "major.minor.patch", and VKATTN_VERSION_NUMBER's formula of it;
 * compare with VKATTN_VERSION_STRING / VKATTN_VERSION_NUMBER, the header's. */
VKATTN_API const char* vkattn_version_string(void);
VKATTN_API uint32_t vkattn_version_number(void);

/* ---- Enumerations (fixed values, append-only) ---- */

typedef int32_t vkattn_backend_kind;
enum { VKATTN_BACKEND_CPU = 0, VKATTN_BACKEND_VULKAN = 1 };

typedef int32_t vkattn_dtype;
enum {
  VKATTN_DTYPE_F32 = 0,  /* 4 bytes */
  VKATTN_DTYPE_F16 = 1,  /* IEEE half, two per 32-bit word; uploads and downloads convert from/to float */
  VKATTN_DTYPE_I32 = 2,  /* positions, sequence ids */
  VKATTN_DTYPE_Q8_0 = 3, /* K and V only: ggml's q8_0 (blocks of 32 along the last dimension, which must
                            be a multiple of 32); uploads quantize, downloads dequantize */
  VKATTN_DTYPE_Q4_0 = 4  /* K and V only: ggml's q4_0, the same way */
};

/* kernel families (DeviceOptions::kernels; docs/kernel-shapes.md) */
enum {
  VKATTN_KERNELS_AUTOMATIC = 0, /* cpu on CPU devices, gpu elsewhere (default; $VKATTN_KERNELS overrides) */
  VKATTN_KERNELS_CPU = 1,
  VKATTN_KERNELS_GPU = 2
};

/* the matrix units (DeviceOptions::matrix_units; docs/gpu.md) */
enum {
  VKATTN_MATRIX_UNITS_ENVIRONMENT = -1, /* $VKATTN_MATRIX, else automatic (default) */
  VKATTN_MATRIX_UNITS_AUTOMATIC = 0,    /* where the device has them, on the allowlist, and they pass a self-test */
  VKATTN_MATRIX_UNITS_OFF = 1,
  VKATTN_MATRIX_UNITS_ON = 2,     /* wherever the device has them (any vendor); the self-test still runs */
  VKATTN_MATRIX_UNITS_STANDIN = 3 /* the matrix kernels in plain GLSL on any device (tests) */
};

/* log levels (DeviceOptions::log_level, vkattn::LogLevel; 0.10) */
typedef int32_t vkattn_log_level;
enum {
  VKATTN_LOG_ENVIRONMENT = -1, /* as a threshold: $VKATTN_LOG, else warning (default) */
  VKATTN_LOG_OFF = 0,          /* as a threshold: nothing */
  VKATTN_LOG_ERROR = 1,        /* validation-layer errors */
  VKATTN_LOG_WARNING = 2,      /* validation-layer warnings, pipeline cache files unusable, a GPU passed over */
  VKATTN_LOG_INFO = 3          /* each pipeline build with its time, the device chosen, memory accounting */
};

/* Receives each message at or above the threshold, on the thread whose call caused it
 * (several at once where backends on several threads share it: make it thread-safe). It must
 * not call vkattn, nor wait for a thread that does (it may run while vkattn holds a lock: a
 * validation message during a submit). |message| is one line, NUL-terminated, valid during
 * the call only. */
typedef void (*vkattn_log_function)(void* user_data, vkattn_log_level level, const char* message);

enum {
  VKATTN_ROPE_LAYOUT_INTERLEAVED = 0, /* pairs (x[2i], x[2i+1]): RoFormer, Meta's Llama, GPT-J */
  VKATTN_ROPE_LAYOUT_HALF = 1         /* pairs (x[i], x[i + d/2]): GPT-NeoX, Hugging Face (default) */
};

/* as RopeScaling in types.hpp; docs/rope.md has the formulas */
enum {
  VKATTN_ROPE_SCALING_NONE = 0,
  VKATTN_ROPE_SCALING_LINEAR = 1,
  VKATTN_ROPE_SCALING_NTK = 2,
  VKATTN_ROPE_SCALING_DYNAMIC_NTK = 3,
  VKATTN_ROPE_SCALING_YARN = 4,
  VKATTN_ROPE_SCALING_LLAMA3 = 5,
  VKATTN_ROPE_SCALING_FACTORS = 6
};

enum {
  VKATTN_ATTENTION_PATH_AUTOMATIC = 0, /* fused, but three stages on CPU devices (default) */
  VKATTN_ATTENTION_PATH_FUSED = 1,
  VKATTN_ATTENTION_PATH_THREE_STAGES = 2
};
/* AttentionPrecision: f32 throughout (default), or Q, K, V and the probabilities rounded
 * to f16 with f32 sums (docs/attention.md: the kernels that run it, the tolerances). */
enum { VKATTN_ATTENTION_PRECISION_F32 = 0, VKATTN_ATTENTION_PRECISION_F16_PRODUCTS = 1 };

enum {
  VKATTN_SOFTCAP_SCALE_THEN_CAP = 0, /* softcap * tanh(scale * qk / softcap): ggml flash attention (default) */
  VKATTN_SOFTCAP_CAP_THEN_SCALE = 1  /* scale * softcap * tanh(qk / softcap): llama.cpp without flash attention */
};

enum {
  VKATTN_MROPE_CONTIGUOUS = 0, /* sections one after another: Qwen2-VL, Qwen2.5-VL */
  VKATTN_MROPE_INTERLEAVED = 1 /* h and w every third pair: Qwen3-VL, Qwen3.5 */
};

enum {
  VKATTN_WINDOW_TRAILING = 0, /* keys with pos_q - pos_k < window (default) */
  VKATTN_WINDOW_SYMMETRIC = 1 /* keys with |pos_q - pos_k| <= window / 2, causal = 0: bidirectional encoders */
};

enum {
  VKATTN_KV_ROPE_STORED = 0, /* keys appended already rotated at their absolute positions (default) */
  VKATTN_KV_ROPE_ON_READ = 1 /* keys appended unrotated, rotated by their in-cache position when read */
};

/* Flags of vkattn_cmd_kv_append (bits, append-only). */
enum {
  VKATTN_KV_APPEND_KEEP_LAST = 1 /* more than capacity - n_sinks new ring tokens of a sequence: keep the last */
};

/* ---- Handles ---- */

typedef struct vkattn_backend vkattn_backend;
typedef struct vkattn_tensor vkattn_tensor;
typedef struct vkattn_command_list vkattn_command_list;
typedef struct vkattn_kv_cache vkattn_kv_cache;
typedef struct vkattn_device_list vkattn_device_list;

/* ---- Devices and backends ---- */

typedef struct vkattn_device_options {
  uint32_t struct_size;           /* set by vkattn_device_options_init */
  int32_t validation;             /* Khronos validation layer: -1 = $VKATTN_VALIDATION == "1" (default; off when
                                     listing devices), 0 off, 1 on */
  const char* device;             /* a device index or case-insensitive name substring; NULL (default): $VKATTN_DEVICE,
                                     else the best device (discrete > integrated > virtual > CPU); copied */
  const char* pipeline_cache_dir; /* NULL (default): $XDG_CACHE_HOME/vkattn or ~/.cache/vkattn; "": no cache; copied */
  uint32_t force_staging;         /* 1: staging copies even on unified memory (tests); default 0 */
  uint32_t submit_timeout_ms;     /* fence wait before VKATTN_ERROR_TIMEOUT (a transfer's own copy: a warning); default 60000 */
  int32_t kernels;                /* VKATTN_KERNELS_AUTOMATIC (default), _CPU or _GPU */
  uint32_t reserved;              /* 0 */
  int32_t matrix_units;           /* VKATTN_MATRIX_UNITS_ENVIRONMENT (default), _AUTOMATIC, _OFF, _ON or _STANDIN */
  uint32_t reserved2;             /* 0 */
  /* 0.10: where messages go; NULL (default): stderr, one line each ("vkattn: warning: ...") */
  /* log and log_user_data serve everything made from the backend until the last of it is
   * destroyed (tensors, caches, lists, submissions), not only until vkattn_backend_destroy:
   * keep the data they use alive until then. */
  vkattn_log_function log;
  void* log_user_data; /* passed to log as is */
  int32_t log_level;   /* the least severe level reported: VKATTN_LOG_ENVIRONMENT (default), _OFF to _INFO */
  uint32_t reserved3;  /* 0 */
} vkattn_device_options;

VKATTN_API vkattn_status vkattn_device_options_init(vkattn_device_options* options, size_t struct_size);

/* One Vulkan device as vkattn sees it. Strings live as long as the list. */
typedef struct vkattn_device_info {
  uint32_t struct_size; /* bytes written */
  uint32_t index;       /* in vkEnumeratePhysicalDevices order */
  const char* name;
  const char* type;        /* "discrete", "integrated", "virtual", "cpu", "other" */
  const char* api_version; /* "1.3.230" */
  const char* driver;
  const char* rejected;              /* why vkattn cannot use it; "" when usable */
  uint32_t chosen;                   /* 1 for the device vkattn_backend_create would pick */
  uint32_t subgroup_size;            /* lanes; 0 when the device reports none */
  uint64_t max_storage_buffer_range; /* bytes */
  uint64_t device_local_bytes;       /* largest device-local heap */
  uint32_t max_shared_memory;        /* bytes per workgroup */
  uint32_t unified_memory;           /* 1 when device-local memory is host-visible */
  uint32_t shader_float16;           /* 1 with fp16 arithmetic */
  uint32_t timestamps;               /* 1 when vkattn can time ops on the device */
  uint32_t matrix_units;             /* 1 when the matrix kernels run on the device's matrix units */
  uint32_t matrix_standin;           /* 1 when they run as plain GLSL instead ($VKATTN_MATRIX=standin) */
  const char* matrix_note;           /* why matrix_units is 0; "" when it is 1 */
} vkattn_device_info;

/* Every Vulkan device, with the one that would be chosen with |options| (optional) marked.
 * Fails only when Vulkan itself is unavailable: VKATTN_ERROR_UNSUPPORTED without a loader,
 * VKATTN_ERROR_NO_DEVICE without a driver (or a Vulkan 1.0 loader); the list may be empty. */
VKATTN_API vkattn_status vkattn_list_devices(const vkattn_device_options* options, vkattn_device_list** list);
VKATTN_API vkattn_status vkattn_device_list_count(const vkattn_device_list* list, size_t* count);
/* Writes the first |info_size| bytes of device |index|'s vkattn_device_info (pass sizeof). */
VKATTN_API vkattn_status vkattn_device_list_get(const vkattn_device_list* list, size_t index, vkattn_device_info* info,
                                                size_t info_size);
VKATTN_API void vkattn_device_list_destroy(vkattn_device_list* list);

/* The limits a backend plans with (vkattn::DeviceLimits, after $VKATTN_CAP_LIMITS;
 * nominal values on the CPU backend). Flags are 0 or 1. 0.10. */
typedef struct vkattn_device_limits {
  uint32_t struct_size;       /* bytes written */
  uint32_t subgroup_size;     /* lanes; 0 when the device reports none */
  uint32_t subgroup_min_size; /* sizes a pipeline may require (size control) */
  uint32_t subgroup_max_size;
  uint32_t subgroup_arithmetic;   /* subgroupAdd/Max/... in compute shaders */
  uint32_t subgroup_shuffle;      /* subgroupShuffle* */
  uint32_t subgroup_vote;         /* subgroupAny/All */
  uint32_t subgroup_size_control; /* VK_EXT_subgroup_size_control */
  uint32_t max_shared_memory;     /* bytes per workgroup */
  uint32_t max_workgroup_invocations;
  uint32_t max_workgroup_size[3];
  uint32_t max_workgroup_count[3];
  uint32_t max_storage_buffers;       /* storage-buffer bindings per kernel */
  uint32_t compute_units;             /* SMs, CUs or shader cores when the driver says; else 0 */
  uint64_t max_storage_buffer_range;  /* bytes */
  uint64_t storage_offset_alignment;  /* bytes */
  uint64_t max_texel_buffer_elements; /* 16-byte texels; 0: inputs not read through texel views */
  uint64_t device_local_bytes;        /* largest device-local heap (CPU backend: physical memory) */
  uint32_t storage_16bit;             /* storageBuffer16BitAccess */
  uint32_t shader_float16;            /* fp16 arithmetic */
  uint32_t timestamps;                /* vkattn can time ops on the device */
  uint32_t unified_memory;            /* device-local memory is host-visible */
  double timestamp_period_ns;         /* ns per timestamp tick */
  uint32_t matrix_units;              /* the matrix kernels run on the device's matrix units */
  uint32_t matrix_standin;            /* they run as plain GLSL instead */
} vkattn_device_limits;

/* A backend: VKATTN_BACKEND_VULKAN runs on a GPU, VKATTN_BACKEND_CPU is the reference.
 * |options| is optional (Vulkan only). VKATTN_ERROR_NO_DEVICE lists each device's
 * rejection reason. */
VKATTN_API vkattn_status vkattn_backend_create(vkattn_backend_kind kind, const vkattn_device_options* options,
                                               vkattn_backend** backend);
VKATTN_API void vkattn_backend_destroy(vkattn_backend* backend);
VKATTN_API vkattn_status vkattn_backend_get_kind(const vkattn_backend* backend, vkattn_backend_kind* kind);
VKATTN_API vkattn_status vkattn_backend_device_name(const vkattn_backend* backend, const char** name);
/* Writes the first |limits_size| bytes of |backend|'s limits (pass sizeof). 0.10. */
VKATTN_API vkattn_status vkattn_backend_limits(const vkattn_backend* backend, vkattn_device_limits* limits, size_t limits_size);
/* Validation-layer warnings and errors seen so far (Vulkan with validation on). The
 * strings live until the next call of vkattn_backend_validation_messages on |backend|. */
VKATTN_API vkattn_status vkattn_backend_validation_messages(vkattn_backend* backend, const char* const** messages, size_t* count);

/* ---- Tensors ---- */

/* A zero-filled tensor; |shape| holds |rank| dimensions, each >= 1 (row-major, innermost last). */
VKATTN_API vkattn_status vkattn_tensor_create(vkattn_backend* backend, const size_t* shape, size_t rank, vkattn_dtype dtype,
                                              vkattn_tensor** tensor);
VKATTN_API void vkattn_tensor_destroy(vkattn_tensor* tensor);
VKATTN_API vkattn_status vkattn_tensor_dtype(const vkattn_tensor* tensor, vkattn_dtype* dtype);
/* The rank, and the dimensions into |dims| when it holds |max_dims| >= rank values
 * (|dims| optional: NULL asks for the rank only). */
VKATTN_API vkattn_status vkattn_tensor_shape(const vkattn_tensor* tensor, size_t* rank, size_t* dims, size_t max_dims);
VKATTN_API vkattn_status vkattn_tensor_numel(const vkattn_tensor* tensor, size_t* numel);

/* Synchronous copies; |count| must be the tensor's numel. f32 data goes to f32 and f16
 * tensors (rounded to nearest even) and back; i32 data to i32 tensors. */
VKATTN_API vkattn_status vkattn_upload_f32(vkattn_backend* backend, vkattn_tensor* tensor, const float* data, size_t count);
VKATTN_API vkattn_status vkattn_upload_i32(vkattn_backend* backend, vkattn_tensor* tensor, const int32_t* data, size_t count);
VKATTN_API vkattn_status vkattn_download_f32(vkattn_backend* backend, const vkattn_tensor* tensor, float* data, size_t count);
VKATTN_API vkattn_status vkattn_download_i32(vkattn_backend* backend, const vkattn_tensor* tensor, int32_t* data, size_t count);
/* The storage bytes as they are (docs/kv-cache.md has the layouts), for saving and
 * restoring any tensor exactly; |size| must be the tensor's byte size. */
VKATTN_API vkattn_status vkattn_tensor_bytes(const vkattn_tensor* tensor, size_t* bytes);
VKATTN_API vkattn_status vkattn_upload_raw(vkattn_backend* backend, vkattn_tensor* tensor, const void* data, size_t size);
VKATTN_API vkattn_status vkattn_download_raw(vkattn_backend* backend, const vkattn_tensor* tensor, void* data, size_t size);

/* ---- Configurations (defaults from the _init functions) ---- */

typedef struct vkattn_rope_config {
  uint32_t struct_size;
  int32_t layout;                 /* VKATTN_ROPE_LAYOUT_HALF (default) or _INTERLEAVED */
  int32_t scaling;                /* VKATTN_ROPE_SCALING_NONE (default) */
  uint32_t rotary_dim;            /* dims rotated, even; 0 (default) = head_dim - rotary_offset */
  double base;                    /* theta_i = base^(-2i/rotary_dim); default 10000 */
  double factor;                  /* context extension factor (linear, ntk, dynamic_ntk, yarn, llama3); default 1 */
  uint64_t original_context;      /* the trained context (dynamic_ntk, yarn, llama3); default 0 */
  uint64_t sequence_length;       /* dynamic_ntk: current length; 0 (default) = 1 + largest position */
  double yarn_beta_fast;          /* default 32 */
  double yarn_beta_slow;          /* default 1 */
  double yarn_mscale;             /* DeepSeek-style attention factor; default 0 = unused */
  double yarn_mscale_all_dim;     /* default 0 = unused */
  double llama3_low_freq_factor;  /* default 1 */
  double llama3_high_freq_factor; /* default 4 */
  const double* freq_factors;     /* VKATTN_ROPE_SCALING_FACTORS: rotary_dim / 2 values; else NULL */
  uint64_t n_freq_factors;
  double attention_factor; /* multiplies the rotated dims; 0 (default) = the scaling's own */
  uint32_t yarn_truncate;  /* 1 (default): floor/ceil YaRN's ramp bounds to whole dims */
  uint32_t reserved;       /* 0 */
  /* 0.3: M-RoPE (Qwen2-VL and later): the rotary pairs each of a token's three positions
   * (t, h, w) rotates, adding up to rotary_dim / 2; positions then come three per token.
   * All 0 (default): plain RoPE. */
  uint32_t mrope_sections[3];
  int32_t mrope_layout; /* VKATTN_MROPE_CONTIGUOUS (default) or VKATTN_MROPE_INTERLEAVED */
  /* 0.4: the first dim rotated, even: dims [rotary_offset, rotary_offset + rotary_dim)
   * rotate, the rest pass through (DeepSeek's MLA keys: 512 of 576); default 0. */
  uint64_t rotary_offset;
} vkattn_rope_config;

typedef struct vkattn_attention_config {
  uint32_t struct_size;
  uint32_t causal;           /* 1 (default): keys with pos_k <= pos_q only */
  double scale;              /* 0 (default) = 1/sqrt(head_dim) */
  uint32_t window;           /* keys with pos_q - pos_k < window; 0 (default) = no window */
  int32_t path;              /* vkattn_cmd_attention only: VKATTN_ATTENTION_PATH_AUTOMATIC (default) */
  double softcap;            /* logit soft-capping (Gemma 2: 50); 0 (default) = off */
  int32_t softcap_order;     /* VKATTN_SOFTCAP_SCALE_THEN_CAP (default) */
  uint32_t alibi;            /* 1: ALiBi with the standard slopes; default 0 */
  const float* alibi_slopes; /* n_heads slopes, replacing the standard ones (implies ALiBi); default NULL */
  uint64_t n_alibi_slopes;
  const float* sinks; /* n_heads sink logits in the softmax denominator (gpt-oss); default NULL */
  uint64_t n_sinks;
  /* 0.3: */
  uint32_t chunk;      /* keys in the query's chunk only: pos_k / chunk == pos_q / chunk (Llama 4:
                          8192); 0 (default) = none */
  int32_t window_type; /* VKATTN_WINDOW_TRAILING (default) or VKATTN_WINDOW_SYMMETRIC */
  /* Query temperature (Llama 4, Ministral 3): scores of query row t times
   * 1 + temperature_scale * ln(1 + floor((pos_q + temperature_offset) / temperature_floor_scale)).
   * temperature_floor_scale 0 (default) = none, and then the other two must be 0. Set, it
   * needs all three: there are no defaults (C++ and Python default to Llama 4's). */
  uint32_t temperature_floor_scale;
  uint32_t temperature_offset; /* < 2^31 (Llama 4: 1; Ministral 3: 0) */
  double temperature_scale;    /* finite, nonzero (Llama 4: 0.1) */
  /* 0.6: how precisely vkattn_cmd_attention computes its products (the stage ops take
   * only f32): VKATTN_ATTENTION_PRECISION_F32 (default) or _F16_PRODUCTS. */
  int32_t precision;
  /* 0.7 (0.6 calls it reserved, 0): vkattn_cmd_attention only (the stage ops take
   * only 0), a promise that each token's mask row leaves at most this many keys (values
   * other than -inf; DeepSeek V3.2's top-k, 2048), so that kernels may read only those (the
   * GPU group decode kernel does: vkattn_attention_run.sparse); a row that leaves more is
   * read whole. 0 (default): no promise. With a mask only; at most n_keys. */
  uint32_t mask_keys;
} vkattn_attention_config;

/* Positions and sequence ids of the query tokens and the keys (int32 in [0, 2^31)). */
typedef struct vkattn_attention_tokens {
  uint32_t struct_size;
  uint32_t reserved;          /* 0 */
  const int32_t* q_positions; /* n_tokens absolute positions (also with VKATTN_KV_ROPE_ON_READ) */
  uint64_t n_q_positions;
  const int32_t* k_positions; /* n_keys, or none: keys at 0..n_keys-1; none over a cache */
  uint64_t n_k_positions;
  const int32_t* q_seq_ids; /* n_tokens, or none: all in sequence 0 */
  uint64_t n_q_seq_ids;
  const int32_t* k_seq_ids; /* n_keys, or none: all in sequence 0; none over a cache */
  uint64_t n_k_seq_ids;
} vkattn_attention_tokens;

typedef struct vkattn_kv_cache_config {
  uint32_t struct_size;
  int32_t dtype;                         /* VKATTN_DTYPE_F16 (default), _F32, _Q8_0 or _Q4_0 */
  uint64_t n_seqs;                       /* sequences held at once; default 1 */
  uint64_t n_kv_heads;                   /* required (0 is rejected) */
  uint64_t head_dim;                     /* required: [1, 576]; even for f16 */
  uint64_t capacity;                     /* required: slots per sequence, in (n_sinks, 2^30] */
  uint64_t n_sinks;                      /* first positions kept for ever (StreamingLLM: 4); default 0 */
  int32_t rope;                          /* VKATTN_KV_ROPE_STORED (default) */
  uint32_t reserved;                     /* 0 */
  const vkattn_rope_config* rope_config; /* VKATTN_KV_ROPE_ON_READ's rotation; optional; copied */
  uint64_t v_head_dim;                   /* V's head dim where it differs from K's; default 0 = head_dim (0.5) */
  /* 0.5: 1: a latent cache (absorbed MLA): V is the first v_head_dim dims of each key row,
   * stored once; v_head_dim <= head_dim; vkattn_cmd_kv_append takes v = NULL. Default 0. */
  uint32_t latent;
  uint32_t reserved2; /* 0 */
  /* 1: a paged cache (docs/kv-cache.md: Paged caches): K and V in a pool of n_blocks blocks
   * of block_size slots shared by the sequences; capacity a multiple of block_size.
   * Default 0. Running out of blocks is VKATTN_ERROR_OUT_OF_DEVICE_MEMORY from the op
   * that needed them, which changes nothing. */
  uint32_t paged;
  uint32_t block_size; /* paged: a power of two in [1, 65536]; default 16 */
  uint64_t n_blocks;   /* paged: required, in [1, 2^31 / block_size], 2^31 - 1 at block size 1 */
} vkattn_kv_cache_config;

typedef struct vkattn_command_list_options {
  uint32_t struct_size;
  uint32_t timestamps; /* 1: time each dispatch (vkattn_command_list_timing); default 0 */
} vkattn_command_list_options;

/* Each fills the first |struct_size| bytes (pass sizeof) with the defaults above. */
VKATTN_API vkattn_status vkattn_rope_config_init(vkattn_rope_config* config, size_t struct_size);
VKATTN_API vkattn_status vkattn_attention_config_init(vkattn_attention_config* config, size_t struct_size);
VKATTN_API vkattn_status vkattn_attention_tokens_init(vkattn_attention_tokens* tokens, size_t struct_size);
VKATTN_API vkattn_status vkattn_kv_cache_config_init(vkattn_kv_cache_config* config, size_t struct_size);
VKATTN_API vkattn_status vkattn_command_list_options_init(vkattn_command_list_options* options, size_t struct_size);

/* ---- KV cache (docs/kv-cache.md) ---- */

/* A zero-filled, empty cache for one layer. VKATTN_ERROR_OUT_OF_DEVICE_MEMORY names the
 * limit when K or V would not fit. */
VKATTN_API vkattn_status vkattn_kv_cache_create(vkattn_backend* backend, const vkattn_kv_cache_config* config,
                                                vkattn_kv_cache** cache);
VKATTN_API void vkattn_kv_cache_destroy(vkattn_kv_cache* cache);
/* Empties sequence |seq|. */
VKATTN_API vkattn_status vkattn_kv_cache_reset(vkattn_kv_cache* cache, size_t seq);
/* Drops positions >= |position| of |seq| (rejected speculative tokens). */
VKATTN_API vkattn_status vkattn_kv_cache_truncate(vkattn_kv_cache* cache, size_t seq, int32_t position);
VKATTN_API vkattn_status vkattn_kv_cache_next_position(const vkattn_kv_cache* cache, size_t seq, int32_t* position);
VKATTN_API vkattn_status vkattn_kv_cache_length(const vkattn_kv_cache* cache, size_t seq, size_t* length);
/* The position held in each of the |count| = capacity slots of |seq|, -1 when empty. */
VKATTN_API vkattn_status vkattn_kv_cache_slot_positions(const vkattn_kv_cache* cache, size_t seq, int32_t* positions,
                                                        size_t count);
VKATTN_API vkattn_status vkattn_kv_cache_slot(const vkattn_kv_cache* cache, int32_t position, size_t* slot);
/* Device bytes of K and V together, fixed for the cache's lifetime. */
VKATTN_API vkattn_status vkattn_kv_cache_bytes(const vkattn_kv_cache* cache, size_t* bytes);
/* 0.9: a cache's whole state (configuration, bookkeeping, K and V as stored; a paged
 * cache's held blocks only), after the lists that wrote it have run: |*data| receives
 * |*size| bytes the library allocated, which vkattn_free releases (NULL and 0 on an error).
 * vkattn_restore_cache puts them back into a cache of the same configuration, on either
 * backend (docs/kv-cache.md: save and restore). */
VKATTN_API vkattn_status vkattn_save_cache(vkattn_backend* backend, const vkattn_kv_cache* cache, void** data, size_t* size);
VKATTN_API vkattn_status vkattn_restore_cache(vkattn_backend* backend, vkattn_kv_cache* cache, const void* data, size_t size);
VKATTN_API void vkattn_free(void* data);
/* A paged cache's pool (VKATTN_ERROR_INVALID_ARGUMENT for a cache that is not paged): the
 * blocks no sequence holds; the block of each of |seq|'s |count| = capacity / block_size
 * runs of slots, -1 where it holds none; the blocks an append of |n_tokens| more tokens to
 * |seq| would take now (new runs, copies of shared blocks); how many sequences hold each of
 * the |count| = n_blocks blocks. */
VKATTN_API vkattn_status vkattn_kv_cache_free_blocks(const vkattn_kv_cache* cache, size_t* free_blocks);
VKATTN_API vkattn_status vkattn_kv_cache_block_table(const vkattn_kv_cache* cache, size_t seq, int32_t* blocks, size_t count);
VKATTN_API vkattn_status vkattn_kv_cache_blocks_to_append(const vkattn_kv_cache* cache, size_t seq, size_t n_tokens,
                                                          size_t* blocks);
VKATTN_API vkattn_status vkattn_kv_cache_block_refs(const vkattn_kv_cache* cache, int32_t* refs, size_t count);

/* ---- Command lists: record ops, then submit them together ---- */

/* |options| is optional. */
VKATTN_API vkattn_status vkattn_command_list_create(vkattn_backend* backend, const vkattn_command_list_options* options,
                                                    vkattn_command_list** list);
VKATTN_API void vkattn_command_list_destroy(vkattn_command_list* list);
/* Runs everything recorded so far and waits; a list can be submitted again. */
VKATTN_API vkattn_status vkattn_submit_and_wait(vkattn_command_list* list);
/* Waits up to |timeout_ns| for the list's submission left running by a vkattn_submit_and_wait
 * that returned VKATTN_ERROR_TIMEOUT, running nothing (a retry would run the list again):
 * *finished = 1 once it has finished or when none runs, 0 on timeout. 0.13. */
VKATTN_API vkattn_status vkattn_command_list_wait(vkattn_command_list* list, uint64_t timeout_ns, uint32_t* finished);

/* Replay (CommandList::set_tokens): records the list's ops again for new tokens, each op
 * taking |positions| (n_positions = the list's number of tokens, which n_tokens gives (0.11;
 * 0: no op takes tokens), or three times it for lists with an M-RoPE op: t, h and w per
 * token, every other op taking t)
 * and, where it took sequence ids, |seq_ids| (NULL/0: each op keeps those it was recorded
 * with, not a replay's; given to a list
 * none of whose ops took any: refused). On Vulkan the
 * command buffer is kept and only parameter bytes change. On an error nothing changes. */
VKATTN_API vkattn_status vkattn_command_list_set_tokens(vkattn_command_list* list, const int32_t* positions, size_t n_positions,
                                                        const int32_t* seq_ids, size_t n_seq_ids);
/* The same with M-RoPE positions apart (CommandList::set_tokens' third span): rope ops of
 * an M-RoPE config take |mrope_positions| (t, h, w per token, or one per token: t = h = w),
 * every other op |positions|, one per token (the cache positions, which an image makes
 * differ from t). NULL/0: as vkattn_command_list_set_tokens. 0.14. */
VKATTN_API vkattn_status vkattn_command_list_set_tokens_mrope(vkattn_command_list* list, const int32_t* positions,
                                                              size_t n_positions, const int32_t* seq_ids, size_t n_seq_ids,
                                                              const int32_t* mrope_positions, size_t n_mrope_positions);
VKATTN_API vkattn_status vkattn_command_list_n_tokens(const vkattn_command_list* list, size_t* n_tokens);

/* Asynchronous submission (CommandList::submit): returns at once with a handle to poll or
 * wait on, which keeps what the work uses alive until it finishes (destroy it whenever).
 * Downloads wait for the submission that wrote the tensor. */
typedef struct vkattn_submission vkattn_submission;
VKATTN_API vkattn_status vkattn_submit(vkattn_command_list* list, vkattn_submission** submission);
/* *ready = 1 once it has finished, else 0; never blocks. */
VKATTN_API vkattn_status vkattn_submission_ready(vkattn_submission* submission, uint32_t* ready);
/* Waits up to timeout_ns: *finished = 1 once it has finished, 0 on timeout (still running). */
VKATTN_API vkattn_status vkattn_submission_wait(vkattn_submission* submission, uint64_t timeout_ns, uint32_t* finished);
VKATTN_API void vkattn_submission_destroy(vkattn_submission* submission);

/* dst = src: same dtype and number of elements. */
VKATTN_API vkattn_status vkattn_cmd_copy(vkattn_command_list* list, const vkattn_tensor* src, vkattn_tensor* dst);
/* RoPE in place on x [n_tokens, n_heads, head_dim] (f32 or f16); |config| optional. */
VKATTN_API vkattn_status vkattn_cmd_rope(vkattn_command_list* list, vkattn_tensor* x, const int32_t* positions,
                                         size_t n_positions, const vkattn_rope_config* config);
/* The same on Q and K (other head counts) in one dispatch; |config| optional (NULL: defaults). */
VKATTN_API vkattn_status vkattn_cmd_rope_qk(vkattn_command_list* list, vkattn_tensor* q, vkattn_tensor* k,
                                            const int32_t* positions, size_t n_positions, const vkattn_rope_config* config);

/* Attention in three stages (docs/attention.md): q [n_tokens, n_heads, head_dim], k [n_keys,
 * n_kv_heads, head_dim], v [n_keys, n_kv_heads, v_head_dim], scores and probs f32 [n_tokens,
 * n_heads, n_keys], out f32 [n_tokens, n_heads, v_head_dim]; |config|, |mask| (f32
 * [n_tokens, n_keys]) optional. */
VKATTN_API vkattn_status vkattn_cmd_attn_scores(vkattn_command_list* list, const vkattn_tensor* q, const vkattn_tensor* k,
                                                vkattn_tensor* scores, const vkattn_attention_tokens* tokens,
                                                const vkattn_attention_config* config, const vkattn_tensor* mask);
VKATTN_API vkattn_status vkattn_cmd_attn_softmax(vkattn_command_list* list, const vkattn_tensor* scores, vkattn_tensor* probs,
                                                 const vkattn_attention_config* config);
VKATTN_API vkattn_status vkattn_cmd_attn_weighted_sum(vkattn_command_list* list, const vkattn_tensor* probs,
                                                      const vkattn_tensor* v, vkattn_tensor* out);
/* Attention in one op (fused, or the three stages as config->path says). |mask| may also
 * be a key list (0.8): i32 [n_tokens, width], width at most 4096, the keys each token may
 * see (-1 and other entries outside [0, n_keys) name none), as attention() in C++. */
VKATTN_API vkattn_status vkattn_cmd_attention(vkattn_command_list* list, const vkattn_tensor* q, const vkattn_tensor* k,
                                              const vkattn_tensor* v, vkattn_tensor* out, const vkattn_attention_tokens* tokens,
                                              const vkattn_attention_config* config, const vkattn_tensor* mask);

/* Writes each token's key and value into its sequence's slot for its position. |seq_ids|
 * (optional) may be none only for a one-sequence cache; |flags|: VKATTN_KV_APPEND_*.
 * |v| is NULL for a latent cache (config->latent: V is inside K), and only then. */
VKATTN_API vkattn_status vkattn_cmd_kv_append(vkattn_command_list* list, vkattn_kv_cache* cache, const vkattn_tensor* k,
                                              const vkattn_tensor* v, const int32_t* positions, size_t n_positions,
                                              const int32_t* seq_ids, size_t n_seq_ids, uint32_t flags);
/* Makes sequence |dst| a copy of |src| (prefix sharing). */
VKATTN_API vkattn_status vkattn_cmd_kv_copy_sequence(vkattn_command_list* list, vkattn_kv_cache* cache, size_t src, size_t dst);
/* The same stages over a cache: n_keys = capacity, keys in slot order. */
VKATTN_API vkattn_status vkattn_cmd_attn_scores_cache(vkattn_command_list* list, const vkattn_tensor* q,
                                                      const vkattn_kv_cache* cache, vkattn_tensor* scores,
                                                      const vkattn_attention_tokens* tokens,
                                                      const vkattn_attention_config* config, const vkattn_tensor* mask);
/* |tokens| optional: as given to vkattn_cmd_attn_scores_cache. */
VKATTN_API vkattn_status vkattn_cmd_attn_weighted_sum_cache(vkattn_command_list* list, const vkattn_tensor* probs,
                                                            const vkattn_kv_cache* cache, vkattn_tensor* out,
                                                            const vkattn_attention_tokens* tokens);
VKATTN_API vkattn_status vkattn_cmd_attention_cache(vkattn_command_list* list, const vkattn_tensor* q,
                                                    const vkattn_kv_cache* cache, vkattn_tensor* out,
                                                    const vkattn_attention_tokens* tokens, const vkattn_attention_config* config,
                                                    const vkattn_tensor* mask);

/* What a list recorded and ran: vkattn/vkattn_inspect.h (included below). */

/* ---- Helpers ---- */

/* The standard ALiBi slopes for |n_heads| heads into |slopes| (|count| = n_heads; NULL, 0 for none). */
VKATTN_API vkattn_status vkattn_alibi_slopes(size_t n_heads, float* slopes, size_t count);
/* The rotary_dim / 2 frequencies (radians per position) and the attention factor that
 * |config| resolves to for |head_dim| and a largest position |max_position|. */
VKATTN_API vkattn_status vkattn_rope_frequencies(const vkattn_rope_config* config, size_t head_dim, int32_t max_position,
                                                 double* theta, size_t count, double* attention_factor);

#ifdef __cplusplus
}
#endif

/* Queries: what a list ran, a cache's configuration, the last error's parts, device
 * details. A header of its own only to keep each file short; vkattn.h is all one includes. */
#include "vkattn/vkattn_inspect.h"

#endif
