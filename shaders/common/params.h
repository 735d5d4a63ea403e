// Push-constant blocks, valid both as GLSL and as C++ so the layout is written once.
// The C++ side static_asserts sizes in src/vulkan/ops/*.cpp. Each shader defines
// VKATTN_WANT_<NAME> for the one block it uses (GLSL allows one push-constant block).
#ifndef VKATTN_PARAMS_H
#define VKATTN_PARAMS_H

#ifdef __cplusplus
#include <cstdint>
namespace vkattn::shader {
using uint = std::uint32_t;
#define VKATTN_PUSH_CONSTANTS(Name) struct Name
#define VKATTN_PC_INSTANCE
#else
#define VKATTN_PUSH_CONSTANTS(Name) layout(push_constant) uniform Name
#define VKATTN_PC_INSTANCE pc
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_COPY)
VKATTN_PUSH_CONSTANTS(CopyParams) {
    uint n_vec4;        // 16-byte units to copy
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ROPE)
VKATTN_PUSH_CONSTANTS(RopeParams) {
    uint n_tokens;
    uint n_heads_q;         // heads of binding 0
    uint n_heads_k;         // heads of binding 1; 0 when one tensor is rotated
    uint head_dim;          // even
    uint rotary_dim;        // even, <= head_dim; dims past it pass through untouched
    uint units_per_row;     // see shaders/common/rope_unit.glsl
    uint heads_per_wg;      // of the q heads followed by the k heads of one token
    uint wgs_per_token;     // ceil((n_heads_q + n_heads_k) / heads_per_wg)
    float attention_factor; // multiplies the rotated dims (YaRN mscale); 1 otherwise
} VKATTN_PC_INSTANCE;
#endif

#ifdef __cplusplus
}  // namespace vkattn::shader
#endif
#undef VKATTN_PUSH_CONSTANTS
#undef VKATTN_PC_INSTANCE
#endif
