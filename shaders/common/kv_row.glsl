// Where row j (a key, or its value) of KV head |kv_head| starts, in elements: rows
// |key_stride| apart, heads |head_stride|, a cache's sequences |seq_stride| (0 for plain
// keys). The one place that knows how K and V rows are laid out. A paged cache (KV_PAGE,
// the spec constant VKATTN_SPEC_KV_PAGE: log2(block_size) + 1) keeps slot j of a sequence
// in block table[j / block_size] of its pool, row j % block_size: the includer defines
// KV_TABLE_WORD(seq, entry) to read the sequence's block table (attn_meta.glsl: the key
// positions binding). KV_PAGE is 0 for everything else, and the compiler drops the lookup.
#ifndef VKATTN_KV_ROW_GLSL
#define VKATTN_KV_ROW_GLSL

layout(constant_id = VKATTN_SPEC_KV_PAGE) const uint KV_PAGE = 0u;

uint kv_row(uint seq, uint kv_head, uint j, uint seq_stride, uint head_stride, uint key_stride) {
#ifdef KV_TABLE_WORD
    if (KV_PAGE != 0u) {
        const uint shift = KV_PAGE - 1u;
        // A run the sequence holds no block for (-1) reads block 0: in bounds, and none of
        // its slots holds a position, so no row sees what is read there.
        const uint block = uint(max(KV_TABLE_WORD(seq, j >> shift), 0));
        return ((block << shift) | (j & ((1u << shift) - 1u))) * key_stride + kv_head * head_stride;
    }
#endif
    return seq * seq_stride + kv_head * head_stride + j * key_stride;
}

// rows[0 .. n - 1] = where rows j .. j + n - 1 start (the last repeated past |last|): one
// block-table read where they share a block (rows of a block are key_stride apart, as
// everywhere without blocks), a read a row only where a run crosses blocks (blocks shorter
// than the run, or runs off its multiples). On CPU devices a table read per row doubled
// the loads of a V sum (paged decode 12-17% behind the ring cache on lavapipe).
#define KV_ROW_RUN(rows, n, seq, kv_head, j, last, seq_stride, head_stride, key_stride)                 \
    if (KV_PAGE == 0u || (((j) ^ (last)) >> (KV_PAGE - 1u)) == 0u) {                                   \
        const uint run_row0_ = kv_row(seq, kv_head, j, seq_stride, head_stride, key_stride);          \
        for (uint i_ = 0u; i_ < (n); ++i_) {                                                          \
            rows[i_] = run_row0_ + min(i_, (last) - (j)) * (key_stride);                              \
        }                                                                                             \
    } else {                                                                                          \
        for (uint i_ = 0u; i_ < (n); ++i_) {                                                          \
            rows[i_] = kv_row(seq, kv_head, min((j) + i_, last), seq_stride, head_stride, key_stride); \
        }                                                                                             \
    }

#endif
