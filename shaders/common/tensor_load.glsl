// Loads from a tensor bound as 32-bit words: f32 bits, f16 packed two per word, or q8_0 and
// q4_0 codes followed by their f16 scales (src/common/quant.hpp has the layout).
// Included once per binding with TL_TYPE a uint constant (0 f32, 1 f16, 2 q8_0, 3 q4_0),
// TL_SCALES the word where a quantized tensor's scales start (an expression; unused
// otherwise), TL_QUANT 1 where the binding may hold a quantized tensor (0 leaves the
// quantized paths out of the module: its size is what a driver, and the validation layer,
// work through for every pipeline built from it, dead branches included), TL_FN the
// prefix of the functions it defines (no include guard; it undefines its parameters at
// the end, ready for the next binding's), and either
//   TL_TEXELS: the binding as a usamplerBuffer of 16-byte texels (R32G32B32A32_UINT), or
//   TL_WORDS (uint[]), TL_WORDS2 (uvec2[]) and TL_WORDS4 (uvec4[]): its storage-buffer views.
// The functions:
//   float TL_FN(_1)(uint e)             element e
//   vec4  TL_FN(_4)(uint e, uint limit) elements e .. e+3, zero at or past |limit|; e % 4 == 0
//   void  TL_FN(_8)(uint e, uint limit, out vec4 lo, out vec4 hi)
//                                       elements e .. e+7 (16 bytes of f16), the same way;
//                                       e % 8 == 0
// When TL_ALIGNED (a constant: every row starts on 4 elements, on 8 for f16 and on 32 for
// the quantized types, and |limit| is a row end), e < limit implies e + 3 < limit (e + 7
// beyond f32), so the vector load needs no check and the scalar path folds away; branches
// left to run time would execute both paths on CPU devices. The quantized types are
// always aligned (head_dim is a multiple of 32).
// Texel buffers are the fast read path on CPU devices: llvmpipe turns a texel fetch into
// branch-free vector loads, but a storage-buffer load at per-invocation addresses into a
// loop over lanes with a bounds check per element. On GPUs the two cost about the same.
#define TL_CAT2(a, b) a##b
#define TL_CAT(a, b) TL_CAT2(a, b)
#ifndef TL_QUANT
#error "tensor_load.glsl: define TL_QUANT (0 or 1)"
#endif
#if TL_QUANT
#define TL_Q8 (TL_TYPE == VKATTN_KV_Q8_0)
#define TL_Q4 (TL_TYPE == VKATTN_KV_Q4_0)
#else
#define TL_Q8 false
#define TL_Q4 false
#endif
#define TL_QUANTIZED (TL_Q8 || TL_Q4)

#ifdef TL_TEXELS
uint TL_CAT(TL_FN, _word)(uint w) { return texelFetch(TL_TEXELS, int(w >> 2))[w & 3u]; }
uvec2 TL_CAT(TL_FN, _word2)(uint w2) {
    const uvec4 t = texelFetch(TL_TEXELS, int(w2 >> 1));
    return (w2 & 1u) != 0u ? t.zw : t.xy;
}
uvec4 TL_CAT(TL_FN, _word4)(uint w4) { return texelFetch(TL_TEXELS, int(w4)); }
#else
uint TL_CAT(TL_FN, _word)(uint w) { return TL_WORDS[w]; }
uvec2 TL_CAT(TL_FN, _word2)(uint w2) { return TL_WORDS2[w2]; }
uvec4 TL_CAT(TL_FN, _word4)(uint w4) { return TL_WORDS4[w4]; }
#endif

// The scale of the quantized block holding element e.
float TL_CAT(TL_FN, _scale)(uint e) {
    const uint b = e / VKATTN_QUANT_BLOCK;
    return unpackHalf2x16(TL_CAT(TL_FN, _word)((TL_SCALES) + b / 2u))[b & 1u];
}

// 4 codes of one word: q8_0 bytes (signed), or the q4_0 nibbles from |shift| on, less 8.
vec4 TL_CAT(TL_FN, _codes4)(uint w, uint shift) {
    if (TL_Q8) {
        const int s = int(w);
        return vec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8),
                    bitfieldExtract(s, 24, 8));
    }
    return vec4(uvec4(w >> shift, w >> (shift + 4u), w >> (shift + 8u), w >> (shift + 12u)) & 15u) - 8.0;
}

float TL_CAT(TL_FN, _1)(uint e) {
    if (TL_Q8) {
        return float(bitfieldExtract(int(TL_CAT(TL_FN, _word)(e >> 2)), int(8u * (e & 3u)), 8)) * TL_CAT(TL_FN, _scale)(e);
    }
    if (TL_Q4) {
        return float(int((TL_CAT(TL_FN, _word)(e >> 3) >> (4u * (e & 7u))) & 15u) - 8) * TL_CAT(TL_FN, _scale)(e);
    }
    if (TL_TYPE == VKATTN_KV_F16) {
        return unpackHalf2x16(TL_CAT(TL_FN, _word)(e >> 1))[e & 1u];
    }
    return uintBitsToFloat(TL_CAT(TL_FN, _word)(e));
}

vec4 TL_CAT(TL_FN, _4)(uint e, uint limit) {
    if (TL_QUANTIZED) {
        const uint w = TL_Q8 ? TL_CAT(TL_FN, _word)(e >> 2) : TL_CAT(TL_FN, _word)(e >> 3);
        return TL_CAT(TL_FN, _codes4)(w, 4u * (e & 4u)) * TL_CAT(TL_FN, _scale)(e);
    }
    if (TL_ALIGNED) {
        if (TL_TYPE == VKATTN_KV_F16) {
            const uvec2 w = TL_CAT(TL_FN, _word2)(e >> 2);
            return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
        }
        return uintBitsToFloat(TL_CAT(TL_FN, _word4)(e >> 2));
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
    if (TL_QUANTIZED) {
        const float d = TL_CAT(TL_FN, _scale)(e);
        if (TL_Q8) {
            const uvec2 w = TL_CAT(TL_FN, _word2)(e >> 3);
            lo = TL_CAT(TL_FN, _codes4)(w.x, 0u) * d;
            hi = TL_CAT(TL_FN, _codes4)(w.y, 0u) * d;
        } else {
            const uint w = TL_CAT(TL_FN, _word)(e >> 3);
            lo = TL_CAT(TL_FN, _codes4)(w, 0u) * d;
            hi = TL_CAT(TL_FN, _codes4)(w, 16u) * d;
        }
        return;
    }
    if (TL_ALIGNED && TL_TYPE == VKATTN_KV_F16) {
        const uvec4 w = TL_CAT(TL_FN, _word4)(e >> 3);
        lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
        hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
        return;
    }
    lo = TL_CAT(TL_FN, _4)(e, limit);
    hi = e + 4u < limit ? TL_CAT(TL_FN, _4)(e + 4u, limit) : vec4(0.0);
}

// Raw pieces, for kernels that keep loads in flight across a step of work (attn_decode):
// _raw8 / _raw4 issue the loads of the piece at element e (e % 8 or e % 4 == 0) and return
// the words undecoded, so that nothing waits for them until _unraw8 / _unraw4 (given the
// same e) decode the piece where it is used. f16 stays two halves per word (unaligned
// pieces are read element by element and packed again as halves, which is exact);
// quantized pieces keep their code words and their block's scale word (e: the element's
// index in the tensor, for _unraw too: which half of the scale word is the block's).
uint TL_CAT(TL_FN, _scale_word)(uint e) { return TL_CAT(TL_FN, _word)((TL_SCALES) + e / (2u * VKATTN_QUANT_BLOCK)); }
float TL_CAT(TL_FN, _scale_of)(uint word, uint e) { return unpackHalf2x16(word)[(e / VKATTN_QUANT_BLOCK) & 1u]; }

uvec4 TL_CAT(TL_FN, _raw8)(uint e, uint limit) {
    if (TL_Q8) {
        return uvec4(TL_CAT(TL_FN, _word2)(e >> 3), TL_CAT(TL_FN, _scale_word)(e), 0u);
    }
    if (TL_Q4) {
        return uvec4(TL_CAT(TL_FN, _word)(e >> 3), TL_CAT(TL_FN, _scale_word)(e), 0u, 0u);
    }
    if (TL_ALIGNED && TL_TYPE == VKATTN_KV_F16) {
        return TL_CAT(TL_FN, _word4)(e >> 3);
    }
    vec4 lo, hi;
    TL_CAT(TL_FN, _8)(e, limit, lo, hi);
    return uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
}

void TL_CAT(TL_FN, _unraw8)(uvec4 raw, uint e, out vec4 lo, out vec4 hi) {
    if (TL_QUANTIZED) {
        const float d = TL_CAT(TL_FN, _scale_of)(TL_Q8 ? raw.z : raw.y, e);
        lo = TL_CAT(TL_FN, _codes4)(raw.x, 0u) * d;
        hi = TL_Q8 ? TL_CAT(TL_FN, _codes4)(raw.y, 0u) * d : TL_CAT(TL_FN, _codes4)(raw.x, 16u) * d;
        return;
    }
    lo = vec4(unpackHalf2x16(raw.x), unpackHalf2x16(raw.y));
    hi = vec4(unpackHalf2x16(raw.z), unpackHalf2x16(raw.w));
}

uvec4 TL_CAT(TL_FN, _raw4)(uint e, uint limit) {
    if (TL_Q8) {
        return uvec4(TL_CAT(TL_FN, _word)(e >> 2), TL_CAT(TL_FN, _scale_word)(e), 0u, 0u);
    }
    if (TL_Q4) {
        return uvec4(TL_CAT(TL_FN, _word)(e >> 3), TL_CAT(TL_FN, _scale_word)(e), 0u, 0u);
    }
    if (TL_ALIGNED) {
        return TL_TYPE == VKATTN_KV_F16 ? uvec4(TL_CAT(TL_FN, _word2)(e >> 2), 0u, 0u) : TL_CAT(TL_FN, _word4)(e >> 2);
    }
    const vec4 v = TL_CAT(TL_FN, _4)(e, limit);
    return TL_TYPE == VKATTN_KV_F16 ? uvec4(packHalf2x16(v.xy), packHalf2x16(v.zw), 0u, 0u) : floatBitsToUint(v);
}

vec4 TL_CAT(TL_FN, _unraw4)(uvec4 raw, uint e) {
    if (TL_QUANTIZED) {
        return TL_CAT(TL_FN, _codes4)(raw.x, TL_Q4 ? 4u * (e & 4u) : 0u) * TL_CAT(TL_FN, _scale_of)(raw.y, e);
    }
    if (TL_TYPE == VKATTN_KV_F16) {
        return vec4(unpackHalf2x16(raw.x), unpackHalf2x16(raw.y));
    }
    return uintBitsToFloat(raw);
}

#undef TL_TEXELS
#undef TL_ALIGNED
#undef TL_WORDS
#undef TL_WORDS2
#undef TL_WORDS4
#undef TL_TYPE
#undef TL_QUANT
#undef TL_Q8
#undef TL_Q4
#undef TL_QUANTIZED
#undef TL_SCALES
#undef TL_FN
