// Where row j (a key, or its value) of KV head |kv_head| starts, in elements: rows
// |key_stride| apart, heads |head_stride|, a cache's sequences |seq_stride| (0 for plain
// keys). The one place that knows how K and V rows are laid out: a paged cache would look
// its pages up here.
#ifndef VKATTN_KV_ROW_GLSL
#define VKATTN_KV_ROW_GLSL

uint kv_row(uint seq, uint kv_head, uint j, uint seq_stride, uint head_stride, uint key_stride) {
    return seq * seq_stride + kv_head * head_stride + j * key_stride;
}

#endif
