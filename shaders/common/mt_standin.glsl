// The matrix-tile layer's stand-in (mt.glsl): a tile is MT_E = 256 / MT_SG floats per
// invocation, element i of invocation `lane` being tile element e = i * MT_SG + lane, at row
// e / 16 and column e % 16. Loads and stores follow the KHR layouts to the letter (row-major:
// row r at at + r * pitch; column-major: column n at at + n * pitch; pitch 0 allowed), halves
// widened by unpackHalf2x16 (exact). mt_mad computes each element as 16 chained fma in k
// order, A(r, k) fetched by a shuffle from the invocation that holds it: for a power-of-two
// MT_SG (8 to 64) the holder's index is a constant of (i, k) and only the source lane
// varies, so everything unrolls (llvmpipe's loop limit counts loops, not unrolled code).
// Below 16 lanes B(k, n) is the invocation's own. (Holding all of B in every invocation
// instead, which needs no shuffle, made llvmpipe's compile of mt_selftest take over 15
// minutes instead of 3 s.)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

const uint MT_E = 256u / MT_SG;
const uint MT_BS = MT_SG > 16u ? MT_SG / 16u : 1u;  // rows of B per holder above 16 lanes

#define MT_A(a) float a[MT_E]
#define MT_B(b) float b[MT_E]
#define MT_ACC(c) float c[MT_E]
#define MT_ACC_ARRAY(c, n) float c[n][MT_E]
#define MT_A_ARRAY(a, n) float a[n][MT_E]
// Tile arrays are walked by loops llvmpipe counts: not unrolled here.
#define MT_UNROLL_ACC [[dont_unroll]]

uint mt_lane() { return gl_SubgroupInvocationID; }
uint mt_row(uint i) { return (i * MT_SG + mt_lane()) >> 4; }
uint mt_col(uint i) { return (i * MT_SG + mt_lane()) & 15u; }
// A(row of element i, k): its holder's index and lane.
uint mt_a_index(uint i, uint k) { return MT_SG >= 16u ? i : (16u * ((i * MT_SG) >> 4) + k) / MT_SG; }
uint mt_a_lane(uint i, uint k) { return MT_SG >= 16u ? (mt_lane() & ~15u) + k : k % MT_SG; }
// B(k, column of element i): its holder's index and lane (this one below 16 lanes).
uint mt_b_index(uint i, uint k) { return MT_SG >= 16u ? k / MT_BS : (16u * k + ((i * MT_SG) & 15u)) / MT_SG; }
uint mt_b_lane(uint k) { return MT_SG >= 16u ? 16u * (k % MT_BS) + (mt_lane() & 15u) : mt_lane(); }

// NaN where an operand breaks the KHR rules: 16-byte offsets and pitches, the pipeline's
// full subgroup (all invocations active).
float mt_poison(uint at, uint pitch) {
    const bool bad = MT_CHECK && (((at | pitch) & 3u) != 0u || gl_SubgroupSize != MT_SG);
    return bad ? uintBitsToFloat(0x7fc00000u) : 0.0;
}
float mt_half(uint word, uint k) { return unpackHalf2x16(word)[k & 1u]; }

#define mt_zero(c)                                        \
    [[unroll]] for (uint i_ = 0u; i_ < MT_E; ++i_) {      \
        c[i_] = 0.0;                                      \
    }
#define mt_load_a(a, arr, at, pitch)                                                        \
    [[unroll]] for (uint i_ = 0u; i_ < MT_E; ++i_) {                                        \
        const uint k_ = mt_col(i_);                                                         \
        a[i_] = mt_half(arr[(at) + mt_row(i_) * (pitch) + (k_ >> 1)], k_) + mt_poison(at, pitch); \
    }
#define mt_load_b(b, arr, at, pitch)                                                        \
    [[unroll]] for (uint i_ = 0u; i_ < MT_E; ++i_) {                                        \
        const uint n_ = mt_col(i_);                                                         \
        b[i_] = mt_half(arr[(at) + mt_row(i_) * (pitch) + (n_ >> 1)], n_) + mt_poison(at, pitch); \
    }
#define mt_load_bt(b, arr, at, pitch)                                                       \
    [[unroll]] for (uint i_ = 0u; i_ < MT_E; ++i_) {                                        \
        const uint k_ = mt_row(i_);                                                         \
        b[i_] = mt_half(arr[(at) + mt_col(i_) * (pitch) + (k_ >> 1)], k_) + mt_poison(at, pitch); \
    }
#define mt_mad(c, a, b)                                                                     \
    [[unroll]] for (uint i_ = 0u; i_ < MT_E; ++i_) {                                        \
        float s_ = c[i_];                                                                   \
        [[unroll]] for (uint k_ = 0u; k_ < 16u; ++k_) {                                     \
            const float x_ = subgroupShuffle(a[mt_a_index(i_, k_)], mt_a_lane(i_, k_));     \
            const float y_ = MT_SG >= 16u ? subgroupShuffle(b[mt_b_index(i_, k_)], mt_b_lane(k_)) \
                                          : b[mt_b_index(i_, k_)];                          \
            s_ = fma(x_, y_, s_);                                                           \
        }                                                                                   \
        c[i_] = s_;                                                                         \
    }
#define mt_store(c, arr, at, pitch)                                                         \
    [[unroll]] for (uint i_ = 0u; i_ < MT_E; ++i_) {                                        \
        arr[(at) + mt_row(i_) * (pitch) + mt_col(i_)] = floatBitsToUint(c[i_] + mt_poison(at, pitch)); \
    }
#define mt_scale_rows(c, arr, at)                                                           \
    [[unroll]] for (uint i_ = 0u; i_ < MT_E; ++i_) {                                        \
        c[i_] *= uintBitsToFloat(arr[(at) + mt_row(i_)]) + mt_poison(at, 0u);               \
    }
