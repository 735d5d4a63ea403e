// f32 -> f16 bits, rounded to nearest even, in integer operations only: packHalf2x16's
// rounding is implementation-defined (AMD's compilers round toward zero), and caches
// appended on a GPU must hold the same bits as those the CPU reference appends
// (src/common/half.hpp, which this mirrors: overflow to inf, subnormals, quiet NaN).
#ifndef VKATTN_HALF_RNE_GLSL
#define VKATTN_HALF_RNE_GLSL

#include "float_bits.glsl"

uint half_bits_rne(float value) {
    const uint f = floatBitsToUint(value);
    const uint sign = (f >> 16) & 0x8000u;
    const uint a = f & 0x7fffffffu;
    if (a >= 0x7f800000u) {  // inf or NaN (kept quiet)
        return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u);
    }
    if (a >= 0x477ff000u) {  // rounds to >= 65520: inf
        return sign | 0x7c00u;
    }
    if (a < 0x38800000u) {  // below the smallest normal half
        if (a < 0x33000000u) {
            return sign;  // < 2^-25: zero
        }
        const uint mant = (a & 0x7fffffu) | 0x800000u;
        const uint shift = 126u - (a >> 23);
        const uint half_ulp = 1u << (shift - 1u);
        uint h = mant >> shift;
        const uint rest = mant & ((1u << shift) - 1u);
        h += (rest > half_ulp || (rest == half_ulp && (h & 1u) != 0u)) ? 1u : 0u;
        return sign | h;
    }
    uint h = (a - 0x38000000u) >> 13;  // rebias the exponent, 127 -> 15
    const uint rest = a & 0x1fffu;
    h += (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0u)) ? 1u : 0u;
    return sign | h;
}

// packHalf2x16 with that rounding: v.x in the low half.
uint pack_half_rne(vec2 v) { return half_bits_rne(v.x) | (half_bits_rne(v.y) << 16); }

#endif
