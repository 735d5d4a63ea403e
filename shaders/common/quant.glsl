// q8_0 and q4_0 blocks (32 values, one f16 scale) quantized exactly as the CPU reference
// does (src/common/quant.hpp: ggml's reference numerics): the two divisions ggml makes
// (d = amax / 127 and 1 / d) are done in integers here, because Vulkan lets a shader's
// division be off by 2.5 ulp, and each product and sum that must round once is `precise`,
// so that no compiler fuses it. The layout and the one deviation from ggml (no subnormal
// scales) are described there.
#ifndef VKATTN_QUANT_GLSL
#define VKATTN_QUANT_GLSL

#include "half_rne.glsl"

const uint QUANT_BLOCK = VKATTN_QUANT_BLOCK;  // params.h

// a / b rounded to nearest even, for positive normal a and b; 0 when the quotient would be
// subnormal. Long division of the 24-bit significands, 26 quotient bits and a sticky bit.
float div_rne(float a, float b) {
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const uint ma = (ua & 0x7fffffu) | 0x800000u, mb = (ub & 0x7fffffu) | 0x800000u;
    int e = int(ua >> 23) - int(ub >> 23) + 127;  // biased exponent of the quotient if ma >= mb
    uint q = 0u, rem = ma;
    for (int i = 0; i < 26; ++i) {
        q <<= 1;
        if (rem >= mb) {
            rem -= mb;
            q |= 1u;
        }
        rem <<= 1;
    }
    // q = floor(ma / mb * 2^25), in [2^24, 2^26).
    uint mant, round_bit, sticky = rem != 0u ? 1u : 0u;
    if (q >= (1u << 25)) {
        mant = q >> 2;
        round_bit = (q >> 1) & 1u;
        sticky |= q & 1u;
    } else {
        mant = q >> 1;
        round_bit = q & 1u;
        e -= 1;
    }
    if (round_bit != 0u && (sticky != 0u || (mant & 1u) != 0u)) {
        mant += 1u;
        if (mant == (1u << 24)) {
            mant >>= 1;
            e += 1;
        }
    }
    if (e <= 0) {
        return 0.0;
    }
    return uintBitsToFloat((uint(e) << 23) | (mant & 0x7fffffu));
}

// round() of C: halves away from zero.
float round_half_away(float v) {
    const float t = trunc(v);
    precise const float frac = v - t;  // exact
    return abs(frac) >= 0.5 ? t + sign(v) : t;
}

// The scale of a q8_0 (Q4 false) or q4_0 block, and the codes: q8_0 as bytes, 4 per word
// (two's complement), q4_0 as nibbles, 8 per word; |words| of which the first 8 (q8_0) or
// 4 (q4_0) are written. Returns the scale's f16 bits.
uint quantize_block(bool Q4, float x[32], out uint words[8]) {
    float d;
    if (Q4) {
        float amax = 0.0, m = 0.0;
        for (uint i = 0u; i < QUANT_BLOCK; ++i) {
            if (amax < abs(x[i])) {
                amax = abs(x[i]);
                m = x[i];
            }
        }
        // 2^-123: |d| stays normal; else 0 with d's sign, -0.0 for zeros (0 / -8, as ggml).
        d = amax >= 9.4039548e-38 ? m * -0.125 : (m >= 0.0 ? uintBitsToFloat(0x80000000u) : 0.0);
    } else {
        float amax = 0.0;
        for (uint i = 0u; i < QUANT_BLOCK; ++i) {
            amax = max(amax, abs(x[i]));
        }
        d = amax > 0.0 ? div_rne(amax, 127.0) : 0.0;
    }
    const float id = d != 0.0 ? sign(d) * div_rne(1.0, abs(d)) : 0.0;
    for (uint w = 0u; w < 8u; ++w) {
        words[w] = 0u;
    }
    for (uint i = 0u; i < QUANT_BLOCK; ++i) {
        precise const float scaled = x[i] * id;
        if (Q4) {
            precise const float shifted = scaled + 8.5;
            // 4 bits only: a NaN's int (outside the contract) must not reach a neighbour.
            const uint q = is_nan_bits(shifted) ? 0u : uint(min(15, int(shifted))) & 15u;
            words[i / 8u] |= q << (4u * (i % 8u));
        } else {
            const int q = is_nan_bits(scaled) ? 0 : int(round_half_away(scaled));
            words[i / 4u] |= (uint(q) & 0xffu) << (8u * (i % 4u));
        }
    }
    return half_bits_rne(d);
}

#endif
