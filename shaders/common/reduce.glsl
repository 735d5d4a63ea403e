// Workgroup-wide max and sum of one float per invocation. With VKATTN_SUBGROUPS the
// subgroup operations reduce first and shared memory combines the subgroups; without, a
// shared-memory tree does it all. Neither assumes a subgroup size: gl_NumSubgroups and
// gl_SubgroupID are read at run time. Every invocation must call (barriers inside), and
// every invocation gets the result. Requires the workgroup size to be a power of two and
// `shared float red[gl_WorkGroupSize.x]` declared by the includer as REDUCE_SCRATCH.
#ifndef VKATTN_REDUCE_GLSL
#define VKATTN_REDUCE_GLSL

#ifdef VKATTN_SUBGROUPS
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#define REDUCE_OP(NAME, SUBGROUP_OP, COMBINE)                                   \
float NAME(float v) {                                                           \
    barrier(); /* the scratch may still be read by a previous reduction */      \
    REDUCE_SUBGROUP_STEP(SUBGROUP_OP, COMBINE)                                  \
}

#ifdef VKATTN_SUBGROUPS
#define REDUCE_SUBGROUP_STEP(SUBGROUP_OP, COMBINE)                              \
    v = SUBGROUP_OP(v);                                                         \
    if (subgroupElect()) {                                                      \
        REDUCE_SCRATCH[gl_SubgroupID] = v;                                      \
    }                                                                           \
    barrier();                                                                  \
    float r = REDUCE_SCRATCH[0];                                                \
    for (uint i = 1u; i < gl_NumSubgroups; ++i) {                               \
        r = COMBINE(r, REDUCE_SCRATCH[i]);                                      \
    }                                                                           \
    return r;
#else
#define REDUCE_SUBGROUP_STEP(SUBGROUP_OP, COMBINE)                              \
    const uint lid = gl_LocalInvocationID.x;                                    \
    REDUCE_SCRATCH[lid] = v;                                                    \
    barrier();                                                                  \
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {                   \
        if (lid < s) {                                                          \
            REDUCE_SCRATCH[lid] = COMBINE(REDUCE_SCRATCH[lid], REDUCE_SCRATCH[lid + s]); \
        }                                                                       \
        barrier();                                                              \
    }                                                                           \
    return REDUCE_SCRATCH[0];
#endif

float reduce_add_(float a, float b) { return a + b; }
REDUCE_OP(workgroup_max, subgroupMax, max)
REDUCE_OP(workgroup_sum, subgroupAdd, reduce_add_)

#endif
