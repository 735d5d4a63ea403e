// One token's RoPE cos/sin table in shared memory, as rope.comp and kv_append.comp's
// rotating variant (VKATTN_KV_ROPE) fill it (put_cs) and rope_unit.glsl reads it (a unit
// is one of VKATTN_ROPE_UNIT_* in params.h; rope_unit.glsl says what each owns). Needs the
// spec constants HALF_ROT (the table's pairs), UNIT and INTERLEAVED (pairs (2i, 2i+1), else
// (i, i + d/2)), and VKATTN_F16 for f16 tensors: ELEM and ELEM4 are then words of two
// halves (packed two per uint, which needs no optional device feature; arithmetic is f32).
#ifndef VKATTN_ROPE_TABLE_GLSL
#define VKATTN_ROPE_TABLE_GLSL

#ifdef VKATTN_F16
#define ELEM uint
#define ELEM4 uvec4
#else
#define ELEM float
#define ELEM4 vec4
#endif

// cos/sin of the token's pairs, laid out so that a unit reads them as whole vectors:
// interleaved: (c_i, s_i, c_i+1, s_i+1) per vec4; half: all cos, then all sin.
const uint TAB_PAD = (HALF_ROT + 3u) / 4u * 4u;
shared vec4 tab[TAB_PAD / 2u];

void put_cs(uint i, vec2 v) {
    if (INTERLEAVED) {
        tab[i / 2u][2u * (i & 1u)] = v.x;
        tab[i / 2u][2u * (i & 1u) + 1u] = v.y;
    } else {
        tab[i / 4u][i & 3u] = v.x;
        tab[TAB_PAD / 4u + i / 4u][i & 3u] = v.y;
    }
}

vec2 cs(uint i) {
    return INTERLEAVED ? vec2(tab[i / 2u][2u * (i & 1u)], tab[i / 2u][2u * (i & 1u) + 1u])
                       : vec2(tab[i / 4u][i & 3u], tab[TAB_PAD / 4u + i / 4u][i & 3u]);
}
vec4 cos4(uint j) { return tab[j]; }                 // half: cos of pairs 4j..4j+3
vec4 sin4(uint j) { return tab[TAB_PAD / 4u + j]; }  // half: sin of pairs 4j..4j+3
vec4 cs4(uint j) { return tab[j]; }                  // interleaved: pairs 2j, 2j+1

// The table entries a VKATTN_ROPE_UNIT_VEC4 unit u uses (rope_unit.glsl); unused otherwise.
struct Trig {
    vec4 v[4];
};
Trig load_trig(uint u) {
    Trig t;
    t.v[0] = t.v[1] = t.v[2] = t.v[3] = vec4(0.0);
    if (UNIT != VKATTN_ROPE_UNIT_VEC4) {
        return t;
    }
#ifdef VKATTN_F16
    if (INTERLEAVED) {
        t.v[0] = cs4(2u * u);
        t.v[1] = cs4(2u * u + 1u);
    } else {
        t.v[0] = cos4(2u * u);
        t.v[1] = sin4(2u * u);
        t.v[2] = cos4(2u * u + 1u);
        t.v[3] = sin4(2u * u + 1u);
    }
#else
    if (INTERLEAVED) {
        t.v[0] = cs4(u);
    } else {
        t.v[0] = cos4(u);
        t.v[1] = sin4(u);
    }
#endif
    return t;
}

#endif
