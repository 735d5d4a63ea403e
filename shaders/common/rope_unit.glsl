// RoPE work on rows of ROPE_BUF (ROPE_BUF4: the same binding seen as 16-byte vectors;
// ROPE_READ4(v) reads vector v, through a texel buffer in rope.comp's VKATTN_TEXEL variant):
// ROPE_FN(row, u) rotates one unit; ROPE_LOOP(...) spreads the units of a range of heads
// of one token over the workgroup's invocations. Included once per tensor binding
// (GLSL cannot pass buffers to functions), so it has no include guard. cs(i) is (cos, sin)
// of pair i for the row's token times the attention factor; cos4/sin4/cs4 read the same
// table four values at a time (rope.comp). f16 results round to nearest even as the CPU
// reference's do (pack_half_rne: packHalf2x16's rounding is implementation-defined, and
// AMD's compilers truncate).
//
// A unit is what one invocation owns, so in-place writes never race (spec constant UNIT;
// constants rather than push constants, so that each pipeline holds one path only):
//   VKATTN_ROPE_UNIT_VEC4 (head_dim and pairs aligned, the common case): one 16-byte vector
//     f32 half: pairs 4u..4u+3 (a vector from each half)   f32 interleaved: pairs 2u, 2u+1
//     f16 half: pairs 8u..8u+7 (a vector from each half)   f16 interleaved: pairs 4u..4u+3
//   VKATTN_ROPE_UNIT_PAIR: pair u (f16 interleaved: one word)
//   VKATTN_ROPE_UNIT_PAIR2: f16 half, pairs 2u, 2u+1: one word from each half
//   VKATTN_ROPE_UNIT_ROW: f16 half with an odd number of pairs (they straddle words): the row
void ROPE_FN(uint row, uint u, Trig tr) {
    const uint base = row * pc.head_dim + pc.rotary_offset;  // the rotated slice
    const uint half_rot = pc.rotary_dim / 2u;
#ifndef VKATTN_F16
    if (UNIT == VKATTN_ROPE_UNIT_VEC4) {
        if (INTERLEAVED) {
            const uint v = base / 4u + u;
            const vec4 x = ROPE_READ4(v);
            const vec4 c = tr.v[0];  // (cos, sin) of pairs 2u and 2u + 1
            ROPE_BUF4[v] = ELEM4(vec4(x.x * c.x - x.y * c.y, x.x * c.y + x.y * c.x,
                                      x.z * c.z - x.w * c.w, x.z * c.w + x.w * c.z));
        } else {
            const uint va = base / 4u + u;
            const uint vb = va + half_rot / 4u;
            const vec4 xa = ROPE_READ4(va), xb = ROPE_READ4(vb);
            const vec4 c = tr.v[0], s = tr.v[1];
            ROPE_BUF4[va] = ELEM4(xa * c - xb * s);
            ROPE_BUF4[vb] = ELEM4(xa * s + xb * c);
        }
    } else {
        const uint a = INTERLEAVED ? base + 2u * u : base + u;
        const uint b = INTERLEAVED ? a + 1u : a + half_rot;
        const vec2 c = cs(u);
        const float xa = float(ROPE_BUF[a]);
        const float xb = float(ROPE_BUF[b]);
        ROPE_BUF[a] = ELEM(xa * c.x - xb * c.y);
        ROPE_BUF[b] = ELEM(xa * c.y + xb * c.x);
    }
#else
    if (UNIT == VKATTN_ROPE_UNIT_VEC4) {
        if (INTERLEAVED) {
            const uint v = base / 8u + u;
            uvec4 w = ROPE_READ4(v);
            for (uint j = 0u; j < 2u; ++j) {
                const vec4 c = tr.v[j];  // pairs 4u + 2j and 4u + 2j + 1
                const vec2 x0 = unpackHalf2x16(w[2u * j]), x1 = unpackHalf2x16(w[2u * j + 1u]);
                w[2u * j] = pack_half_rne(vec2(x0.x * c.x - x0.y * c.y, x0.x * c.y + x0.y * c.x));
                w[2u * j + 1u] = pack_half_rne(vec2(x1.x * c.z - x1.y * c.w, x1.x * c.w + x1.y * c.z));
            }
            ROPE_BUF4[v] = w;
        } else {
            const uint va = base / 8u + u;
            const uint vb = va + half_rot / 8u;
            uvec4 wa = ROPE_READ4(va), wb = ROPE_READ4(vb);
            for (uint j = 0u; j < 2u; ++j) {
                const vec4 c = tr.v[2u * j], s = tr.v[2u * j + 1u];  // pairs 8u + 4j ..
                const vec4 xa = vec4(unpackHalf2x16(wa[2u * j]), unpackHalf2x16(wa[2u * j + 1u]));
                const vec4 xb = vec4(unpackHalf2x16(wb[2u * j]), unpackHalf2x16(wb[2u * j + 1u]));
                const vec4 ya = xa * c - xb * s, yb = xa * s + xb * c;
                wa[2u * j] = pack_half_rne(ya.xy);
                wa[2u * j + 1u] = pack_half_rne(ya.zw);
                wb[2u * j] = pack_half_rne(yb.xy);
                wb[2u * j + 1u] = pack_half_rne(yb.zw);
            }
            ROPE_BUF4[va] = wa;
            ROPE_BUF4[vb] = wb;
        }
    } else if (UNIT == VKATTN_ROPE_UNIT_PAIR) {  // interleaved: a pair is a word
        const uint w = base / 2u + u;
        const vec2 x = unpackHalf2x16(ROPE_BUF[w]);
        const vec2 c = cs(u);
        ROPE_BUF[w] = pack_half_rne(vec2(x.x * c.x - x.y * c.y, x.x * c.y + x.y * c.x));
    } else if (UNIT == VKATTN_ROPE_UNIT_PAIR2) {
        const uint wa = base / 2u + u;
        const uint wb = wa + half_rot / 2u;
        const vec2 xa = unpackHalf2x16(ROPE_BUF[wa]);  // elements 2u, 2u + 1
        const vec2 xb = unpackHalf2x16(ROPE_BUF[wb]);  // their partners, d/2 further
        const vec2 c0 = cs(2u * u);
        const vec2 c1 = cs(2u * u + 1u);
        ROPE_BUF[wa] = pack_half_rne(vec2(xa.x * c0.x - xb.x * c0.y, xa.y * c1.x - xb.y * c1.y));
        ROPE_BUF[wb] = pack_half_rne(vec2(xa.x * c0.y + xb.x * c0.x, xa.y * c1.y + xb.y * c1.x));
    } else {
        for (uint i = 0u; i < half_rot; ++i) {
            const uint ea = base + i;
            const uint eb = ea + half_rot;
            vec2 wa = unpackHalf2x16(ROPE_BUF[ea / 2u]);
            vec2 wb = unpackHalf2x16(ROPE_BUF[eb / 2u]);
            const float xa = wa[ea & 1u], xb = wb[eb & 1u];
            const vec2 c = cs(i);
            wa[ea & 1u] = xa * c.x - xb * c.y;
            ROPE_BUF[ea / 2u] = pack_half_rne(wa);
            wb = unpackHalf2x16(ROPE_BUF[eb / 2u]);  // may be the word just written
            wb[eb & 1u] = xa * c.y + xb * c.x;
            ROPE_BUF[eb / 2u] = pack_half_rne(wb);
        }
    }
#endif
}

// Units of heads [ha, hb) of |token| (n_heads per token), spread over the workgroup's
// invocations; (h, u) advance without a division in the loop.
void ROPE_LOOP(uint token, uint n_heads, uint ha, uint hb, uint lid, uint n_lanes) {
    if (ha >= hb) {
        return;
    }
    const uint units_per_row = pc.units_per_row;
    const uint n_units = (hb - ha) * units_per_row;
    uint h = ha + lid / units_per_row;
    uint u = lid % units_per_row;
    const uint dh = n_lanes / units_per_row;
    const uint du = n_lanes % units_per_row;
    if (du == 0u) {
        // The usual case: the row's units divide the workgroup, so each invocation keeps one
        // unit index (its cos/sin read from shared memory once, not once per head), and each
        // group of units_per_row invocations takes a run of consecutive rows: a subgroup
        // then walks memory forwards, which hardware prefetchers follow, rather than
        // jumping dh rows at a time.
        const Trig tr = load_trig(u);
        const uint n_rows = hb - ha, groups = dh;
        const uint per_group = (n_rows + groups - 1u) / groups;
        const uint g = lid / units_per_row;
        const uint h_end = min(ha + (g + 1u) * per_group, hb);
        for (uint hh = ha + g * per_group; hh < h_end; ++hh) {
            ROPE_FN(token * n_heads + hh, u, tr);
        }
        return;
    }
    for (uint n = lid; n < n_units; n += n_lanes) {
        ROPE_FN(token * n_heads + h, u, load_trig(u));
        u += du;
        h += dh;
        if (u >= units_per_row) {
            u -= units_per_row;
            h += 1u;
        }
    }
}
