// Loads from a tensor bound as 32-bit words: f32 bits, or f16 packed two per word.
// Included once per binding with TL_F16 a bool constant, TL_FN the prefix of the functions
// it defines (no include guard), and either
//   TL_TEXELS: the binding as a usamplerBuffer of 16-byte texels (R32G32B32A32_UINT), or
//   TL_WORDS (uint[]), TL_WORDS2 (uvec2[]) and TL_WORDS4 (uvec4[]): its storage-buffer views.
// The functions:
//   float TL_FN(_1)(uint e)             element e
//   vec4  TL_FN(_4)(uint e, uint limit) elements e .. e+3, zero at or past |limit|; e % 4 == 0
//   void  TL_FN(_8)(uint e, uint limit, out vec4 lo, out vec4 hi)
//                                       elements e .. e+7 (16 bytes of f16), the same way;
//                                       e % 8 == 0
// When TL_ALIGNED (a constant: every row starts on 4 elements, on 8 for f16, and |limit| is
// a row end), e < limit implies e + 3 < limit (e + 7 for f16), so the vector load needs no
// check and the scalar path folds away; branches left to run time would execute both
// paths on CPU devices.
// Texel buffers are the fast read path on CPU devices: llvmpipe turns a texel fetch into
// branch-free vector loads, but a storage-buffer load at per-invocation addresses into a
// loop over lanes with a bounds check per element. On GPUs the two cost about the same.
#define TL_CAT2(a, b) a##b
#define TL_CAT(a, b) TL_CAT2(a, b)

#ifdef TL_TEXELS
float TL_CAT(TL_FN, _1)(uint e) {
    if (TL_F16) {
        return unpackHalf2x16(texelFetch(TL_TEXELS, int(e >> 3))[(e >> 1) & 3u])[e & 1u];
    }
    return uintBitsToFloat(texelFetch(TL_TEXELS, int(e >> 2))[e & 3u]);
}
#else
float TL_CAT(TL_FN, _1)(uint e) {
    return TL_F16 ? unpackHalf2x16(TL_WORDS[e >> 1])[e & 1u] : uintBitsToFloat(TL_WORDS[e]);
}
#endif

vec4 TL_CAT(TL_FN, _4)(uint e, uint limit) {
    if (TL_ALIGNED) {
#ifdef TL_TEXELS
        if (TL_F16) {
            const uvec4 t = texelFetch(TL_TEXELS, int(e >> 3));
            const uvec2 w = (e & 4u) != 0u ? t.zw : t.xy;
            return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
        }
        return uintBitsToFloat(texelFetch(TL_TEXELS, int(e >> 2)));
#else
        if (TL_F16) {
            const uvec2 w = TL_WORDS2[e >> 2];
            return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
        }
        return uintBitsToFloat(TL_WORDS4[e >> 2]);
#endif
    }
    vec4 v = vec4(0.0);
    for (uint i = 0u; i < 4u; ++i) {
        if (e + i < limit) {
            v[i] = TL_CAT(TL_FN, _1)(e + i);
        }
    }
    return v;
}

void TL_CAT(TL_FN, _8)(uint e, uint limit, out vec4 lo, out vec4 hi) {
    if (TL_ALIGNED && TL_F16) {
#ifdef TL_TEXELS
        const uvec4 w = texelFetch(TL_TEXELS, int(e >> 3));
#else
        const uvec4 w = TL_WORDS4[e >> 3];
#endif
        lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
        hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
        return;
    }
    lo = TL_CAT(TL_FN, _4)(e, limit);
    hi = e + 4u < limit ? TL_CAT(TL_FN, _4)(e + 4u, limit) : vec4(0.0);
}
