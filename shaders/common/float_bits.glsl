// NaN and inf told from the bits: Vulkan lets a compiler assume that isnan and isinf are
// false (no kernel declares SignedZeroInfNanPreserve; Metal's fast math, which MoltenVK
// turns on for such shaders, does), which would fold away a result that depends on them.
#ifndef VKATTN_FLOAT_BITS_GLSL
#define VKATTN_FLOAT_BITS_GLSL

bool is_nan_bits(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
bool any_not_finite(vec4 x) { return any(equal(floatBitsToUint(x) & 0x7f800000u, uvec4(0x7f800000u))); }

#endif
