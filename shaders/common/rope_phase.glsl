// cos and sin of the RoPE angle pos * theta, with an error that depends neither on the
// position nor on the driver.
//
// The host stores each frequency as turns per token in 64-bit fixed point,
// f = theta / (2 pi) * 2^64 as (lo, hi) words. The fraction of a turn at position pos is
// (pos * f) mod 2^64, formed exactly with a 32x32->64 product; only its top bits are
// needed. The turn is split into a quadrant q and a remainder r in [-pi/4, pi/4], and
// sin/cos of r come from Taylor polynomials (error < 3e-8 on that interval): the
// built-ins are only promised to 2^-11 absolute, and only inside [-pi, pi].
#ifndef VKATTN_ROPE_PHASE_GLSL
#define VKATTN_ROPE_PHASE_GLSL

vec2 rope_cos_sin(uint pos, uvec2 turns_fixed) {
    uint carry, low;
    umulExtended(pos, turns_fixed.x, carry, low);
    uint frac_hi = pos * turns_fixed.y + carry;        // top 32 bits of the turn fraction
    // pos is a signed 32-bit integer (positions are below 2^31, but a key's in-cache
    // position is negative in a list recorded before its sequence's ring moved back):
    // sign-extended, the product loses 2^32 f mod 2^64, f's low word in the high one.
    if (int(pos) < 0) frac_hi -= turns_fixed.x;
    uint q = (frac_hi + 0x20000000u) >> 30;            // nearest quarter turn (4 wraps to 0)
    int rem = int(frac_hi - (q << 30));                // in [-2^29, 2^29)
    // Units of 2^-32 turn; 2 pi / 2^32 = (pi / 2) / 2^30 radians each.
    float r = (float(rem) + float(low) * 2.3283064365386963e-10) * 1.4629180792671596e-9;
    float r2 = r * r;
    float s = r * (1.0 + r2 * (-1.0 / 6.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 5040.0 + r2 * (1.0 / 362880.0)))));
    float c = 1.0 + r2 * (-0.5 + r2 * (1.0 / 24.0 + r2 * (-1.0 / 720.0 + r2 * (1.0 / 40320.0))));
    switch (q & 3u) {
        case 0u: return vec2(c, s);
        case 1u: return vec2(-s, c);
        case 2u: return vec2(-c, -s);
        default: return vec2(s, -c);
    }
}

#endif
