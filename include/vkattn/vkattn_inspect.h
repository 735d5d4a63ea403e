/* Part of vkattn's C API (vkattn.h includes it; its conventions and ABI rules hold here):
 * what the library and its objects say about themselves. What a command list recorded and
 * ran; since 0.12, a cache's configuration, the parts of the last error, the spec minimum
 * limits, a device's cooperative-matrix shapes and the dtypes' names. */
#ifndef VKATTN_VKATTN_INSPECT_H
#define VKATTN_VKATTN_INSPECT_H

#include "vkattn/vkattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Command lists ---- */

/* Per-dispatch times of the last vkattn_submit_and_wait (lists made with timestamps = 1), in
 * recording order; none after a vkattn_submit. The op names live until the next submit of
 * |list|. */
VKATTN_API vkattn_status vkattn_command_list_timing_count(const vkattn_command_list* list, size_t* count);
VKATTN_API vkattn_status vkattn_command_list_timing(const vkattn_command_list* list, size_t index, const char** op, double* ms);

typedef struct vkattn_command_stats {
  uint32_t struct_size; /* bytes written */
  uint32_t reserved;
  uint64_t ops;         /* dispatches recorded */
  uint64_t barriers;    /* pipeline barriers between them (Vulkan) */
  uint64_t submits;     /* submissions (vkattn_submit counts when it submits) */
  uint64_t texel_reads; /* inputs read through texel buffers (Vulkan) */
  uint64_t encodings;   /* times the ops were recorded into a command buffer (Vulkan) */
} vkattn_command_stats;
VKATTN_API vkattn_status vkattn_command_list_stats(const vkattn_command_list* list, vkattn_command_stats* stats,
                                                   size_t stats_size);

/* Which kernels ran each vkattn_cmd_attention of a list (vkattn::AttentionKernel). */
enum {
  VKATTN_ATTENTION_KERNEL_REFERENCE = 0,     /* the CPU backend's plain loops */
  VKATTN_ATTENTION_KERNEL_THREE_STAGES = 1,  /* scores, softmax, weighted sum on a temporary */
  VKATTN_ATTENTION_KERNEL_LANE_PER_KEY = 2,  /* the lane-per-key fused kernel (CPU devices) */
  VKATTN_ATTENTION_KERNEL_DECODE = 3,        /* the GPU decode kernel */
  VKATTN_ATTENTION_KERNEL_GROUP = 4,         /* the GPU group kernel (big query groups of wide heads) */
  VKATTN_ATTENTION_KERNEL_TILED = 5,         /* the GPU tiled prefill kernel */
  VKATTN_ATTENTION_KERNEL_MATRIX = 6,        /* the matrix-unit kernel (f16 products) */
  VKATTN_ATTENTION_KERNEL_MATRIX_STANDIN = 7 /* its stand-in (VKATTN_MATRIX=standin) */
};
typedef struct vkattn_attention_run {
  uint32_t struct_size; /* bytes written */
  uint32_t kernel;      /* VKATTN_ATTENTION_KERNEL_* */
  uint32_t splits;      /* key ranges merged afterwards; 1: none */
  uint32_t precision;   /* VKATTN_ATTENTION_PRECISION_* computed at: F32 where F16_PRODUCTS was
                           asked and the exact kernels took the op */
  /* 0.7: */
  uint32_t sparse;   /* 1: the kernels read only the keys each token's mask leaves (mask_keys) or lists */
  uint32_t reserved; /* 0 */
} vkattn_attention_run;
/* The attention ops recorded in |list| (after a set_tokens, as rebuilt), and the |index|-th
 * of them in recording order. */
VKATTN_API vkattn_status vkattn_command_list_attention_count(const vkattn_command_list* list, size_t* count);
VKATTN_API vkattn_status vkattn_command_list_attention_run(const vkattn_command_list* list, size_t index,
                                                           vkattn_attention_run* run, size_t run_size);
/* "three_stages", "decode", ... for a VKATTN_ATTENTION_KERNEL_* value; "unknown" for another. */
VKATTN_API const char* vkattn_attention_kernel_name(uint32_t kernel);

/* ---- The last error's parts (0.12) ---- */

/* vkattn_last_error_message split as vkattn::Error and vkattn::InvalidArgument carry it.
 * Strings live as long as the message: until the next vkattn call on the same thread
 * (this one aside). */
typedef struct vkattn_error_details {
  uint32_t struct_size; /* bytes written */
  int32_t vk_result;    /* the failing VkResult; 0 when none (-1, VK_ERROR_OUT_OF_HOST_MEMORY, for host memory) */
  const char* op;       /* the operation that was refused or failed ("rope", "create backend"); "" when none */
  const char* call;     /* the failing Vulkan call or check ("vkAllocateMemory"); "" when none */
  const char* param;    /* VKATTN_ERROR_INVALID_ARGUMENT: the parameter ("positions[1]"); "" otherwise */
  const char* message;  /* the explanation alone, without op, call or code; "" after a success */
} vkattn_error_details;
/* Writes the first |details_size| bytes (pass sizeof) of the last failure's parts on this
 * thread (all "" and 0 after a success). Unlike every other call it keeps the last error:
 * a NULL |details| or a bad size returns VKATTN_ERROR_INVALID_ARGUMENT and changes nothing. */
VKATTN_API vkattn_status vkattn_last_error_details(vkattn_error_details* details, size_t details_size);

/* ---- Caches (0.12) ---- */

/* Writes the first |config_size| bytes of the configuration |cache| was made with (as
 * given, the defaults of unset fields filled in; a wrapped cache's too). rope_config is
 * never NULL: it points to the rotation on read (VKATTN_KV_ROPE_STORED: the defaults),
 * held by |cache| until it is destroyed, its freq_factors with it. */
VKATTN_API vkattn_status vkattn_kv_cache_get_config(const vkattn_kv_cache* cache, vkattn_kv_cache_config* config,
                                                    size_t config_size);

/* ---- Devices (0.12) ---- */

/* The smallest limits Vulkan 1.1 allows a device (vkattn::spec_minimum_limits), what
 * $VKATTN_CAP_LIMITS=spec_minimum plans with. */
VKATTN_API vkattn_status vkattn_spec_minimum_limits(vkattn_device_limits* limits, size_t limits_size);

/* One of the cooperative-matrix shapes a device lists (VK_KHR_cooperative_matrix's
 * properties; vkattn::MatrixShape). Strings live as long as the device list. */
typedef struct vkattn_matrix_shape {
  uint32_t struct_size; /* bytes written */
  uint32_t m;           /* A is m x k, B k x n, C and the result m x n */
  uint32_t n;
  uint32_t k;
  const char* a; /* component types: "f16", "f32", "bf16", "s8", "e4m3", ..., or "type <value>" */
  const char* b;
  const char* c;
  const char* result;
  const char* scope;   /* "subgroup", "workgroup", "device", "queue family" or "scope <value>" */
  uint32_t saturating; /* 1: saturatingAccumulation (integer types) */
  uint32_t reserved;   /* 0 */
} vkattn_matrix_shape;
/* Device |index|'s shapes, as many as it lists (none without the extension), and the
 * |shape_index|-th of them. */
VKATTN_API vkattn_status vkattn_device_list_matrix_shape_count(const vkattn_device_list* list, size_t index, size_t* count);
VKATTN_API vkattn_status vkattn_device_list_matrix_shape(const vkattn_device_list* list, size_t index, size_t shape_index,
                                                         vkattn_matrix_shape* shape, size_t shape_size);

/* "f32", "f16", "i32", "q8_0", "q4_0" for a VKATTN_DTYPE_* value; "unknown" for another. 0.12. */
VKATTN_API const char* vkattn_dtype_name(vkattn_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
