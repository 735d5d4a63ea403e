// How attn_decode's key groups share their numbers: the reduce-scatter of the partial dot
// products, and the all-gathers of scores and probabilities. Two variants behind the same
// three functions: subgroup shuffles (the default; LANES divides the required, full
// subgroup size), or shared memory with workgroup barriers (VKATTN_SHARED_REDUCE: devices
// without subgroup size control or with partial subgroups).
//
// A key group holds N = ROWS * KEYS dot products (index idx = r * KEYS + b), each spread over
// its LANES lanes. After the reduce-scatter a lane holds C = max(1, N / LANES) whole sums,
// indices (lane >> SHIFT) * C + j for j < C; when N < LANES, the lanes that differ only in
// their low SHIFT bits hold the same ones. So each score's visibility, bias and exp run
// once per key group, not in every lane.
// Needs the spec constants N, C (given by the host: arrays sized by specialization-constant
// expressions came out wrong on llvmpipe), LANES and WG. The values live in the globals
// below rather than in array parameters, which would be copied.
#ifndef VKATTN_ATTN_DECODE_XCHG_GLSL
#define VKATTN_ATTN_DECODE_XCHG_GLSL

const uint G = WG / LANES;
float dots[N];      // this lane's partial dot products
float held[C];      // this lane's sums: dots, then scores, then probabilities
float gathered[N];  // every value of the key group

// log2 of a power of two (a constant after specialization).
uint log2u(uint x) { return uint(findMSB(x)); }
// Lanes whose low SHIFT bits differ hold the same sums.
uint xchg_shift() { return log2u(LANES) - log2u(N / C); }
// Index of this lane's j-th sum.
uint held_index(uint lane, uint j) { return (lane >> xchg_shift()) * C + j; }

#ifdef VKATTN_SHARED_REDUCE
shared float red_sh[WG * N];  // [group][idx][lane]
shared float score_sh[G * N];
shared float prob_sh[G * N];

void reduce_scatter(uint lane, uint group) {
    [[unroll]] for (uint i = 0u; i < N; ++i) {
        red_sh[(group * N + i) * LANES + lane] = dots[i];
    }
    barrier();
    [[unroll]] for (uint j = 0u; j < C; ++j) {
        const uint base = (group * N + held_index(lane, j)) * LANES;
        float s = 0.0;
        for (uint l = 0u; l < LANES; ++l) {
            s += red_sh[base + l];
        }
        held[j] = s;
    }
}

// gathered[idx] = the value its holder keeps as held[idx % C]; |which| picks the array (0:
// scores, 1: probabilities) so that reading one and writing the other never race.
void all_gather(uint lane, uint group, uint which) {
    if ((lane & ((1u << xchg_shift()) - 1u)) == 0u) {  // one writer per value
        [[unroll]] for (uint j = 0u; j < C; ++j) {
            if (which == 0u) {
                score_sh[group * N + held_index(lane, j)] = held[j];
            } else {
                prob_sh[group * N + held_index(lane, j)] = held[j];
            }
        }
    }
    barrier();
    [[unroll]] for (uint i = 0u; i < N; ++i) {
        gathered[i] = which == 0u ? score_sh[group * N + i] : prob_sh[group * N + i];
    }
}
#else
// Halving exchanges: in the round of offset o a lane keeps the half of its values its bit
// o selects and adds its partner's copy of that half; once one value is left, the rest of
// the rounds add it up whole.
void reduce_scatter(uint lane, uint group) {
    uint count = N;
    [[unroll]] for (uint o = LANES / 2u; o > 0u; o >>= 1u) {
        if (count > 1u) {
            const uint half_n = count / 2u;
            const bool upper = (lane & o) != 0u;
            [[unroll]] for (uint i = 0u; i < half_n; ++i) {
                const float send = upper ? dots[i] : dots[half_n + i];
                const float keep = upper ? dots[half_n + i] : dots[i];
                dots[i] = keep + subgroupShuffleXor(send, o);
            }
            count = half_n;
        } else {
            dots[0] += subgroupShuffleXor(dots[0], o);
        }
    }
    [[unroll]] for (uint j = 0u; j < C; ++j) {
        held[j] = dots[j];
    }
}

void all_gather(uint lane, uint group, uint which) {
    const uint first = gl_SubgroupInvocationID - lane;  // the key group's first lane
    [[unroll]] for (uint i = 0u; i < N; ++i) {
        gathered[i] = subgroupShuffle(held[i % C], first + ((i / C) << xchg_shift()));
    }
}
#endif

#endif
