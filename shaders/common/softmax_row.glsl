// What every softmax in vkattn's kernels shares: the empty row's maximum and the factor
// that ends a row, with a head's sink logit in its denominator (gpt-oss: a virtual key
// with no value, joining at the common maximum as attn_softmax has it).
#ifndef VKATTN_SOFTMAX_ROW_GLSL
#define VKATTN_SOFTMAX_ROW_GLSL

const float NEG_MAX = -3.4028234663852886e38;  // -FLT_MAX, not -inf: exp(-inf - m) must be 0

// The factor of the sums of p * v of a row with max |m| and sum of exponentials |l|:
// 1 / its denominator, 0 for a row with no visible key (its sums are zeros, and so is
// its output, sink or not).
float row_factor(float m, float l, bool has_sink, float sink_logit) {
    float scale = 1.0, den = l;
    if (has_sink) {
        const float m_fin = max(m, sink_logit);
        scale = exp(m - m_fin);
        den = den * scale + exp(sink_logit - m_fin);
    }
    return den > 0.0 ? scale / den : 0.0;
}

#endif
