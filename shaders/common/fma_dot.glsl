// acc + <a, b> as a chain of fused multiply-adds. dot() leaves the multiplies and adds
// separate on compilers without contraction (llvmpipe: twice the instructions); fma()
// is one instruction on every GPU, and rounds once per term instead of twice.
#ifndef VKATTN_FMA_DOT_GLSL
#define VKATTN_FMA_DOT_GLSL

float fma_dot(vec4 a, vec4 b, float acc) {
    return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, acc))));
}

#endif
