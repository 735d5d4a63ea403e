// The key groups of one workgroup, each over its own keys, meet in key group 0: one row's
// partial results (lo, hi: an invocation's v elements; l: the row's sum of exponentials,
// or anything where there is none) added up through shared memory, which this declares.
// Needs KEY_GROUPS and WG_SIZE.
#ifndef VKATTN_ATTN_KEY_GROUPS_GLSL
#define VKATTN_ATTN_KEY_GROUPS_GLSL

shared vec4 partial[WG_SIZE * 2u];
shared float partial_l[WG_SIZE];

void sum_key_groups(uint lid, uint lane, uint lanes, uint key_group, inout vec4 lo, inout vec4 hi, inout float l) {
    partial[2u * lid] = lo;
    partial[2u * lid + 1u] = hi;
    partial_l[lid] = l;
    barrier();
    if (key_group == 0u) {
        for (uint g = 1u; g < KEY_GROUPS; ++g) {
            const uint at = g * lanes + lane;
            lo += partial[2u * at];
            hi += partial[2u * at + 1u];
            l += partial_l[g * lanes];  // every lane of a group holds its l
        }
    }
    barrier();
}

#endif
