// The specialization constants both matrix kernels (attn_mt.comp, attn_mt2.comp) take, by
// params.h's VKATTN_SPEC_MT_* ids; each kernel declares its own besides.
#ifndef VKATTN_MT_SPECS_GLSL
#define VKATTN_MT_SPECS_GLSL
layout(constant_id = VKATTN_SPEC_MT_SG) const uint MT_SG = 8;  // required, full subgroups
layout(constant_id = VKATTN_SPEC_MT_SUBGROUPS) const uint SUBGROUPS = 2;  // WG_SIZE / MT_SG
layout(constant_id = VKATTN_SPEC_MT_KEY_CHUNKS) const uint KEY_CHUNKS = 1;  // 16-key chunks a tile
layout(constant_id = VKATTN_SPEC_MT_DK_CHUNKS) const uint DK_CHUNKS = 8;  // 16-dim chunks of Q and K rows
layout(constant_id = VKATTN_SPEC_MT_DV_CHUNKS) const uint DV_CHUNKS = 8;  // of V rows
layout(constant_id = VKATTN_SPEC_MT_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_MT_K_TYPE) const uint K_TYPE = VKATTN_KV_F16;  // VKATTN_KV_*
layout(constant_id = VKATTN_SPEC_MT_V_TYPE) const uint V_TYPE = VKATTN_KV_F16;
layout(constant_id = VKATTN_SPEC_MT_Q_ALIGNED) const bool Q_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_MT_K_ALIGNED) const bool K_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_MT_V_ALIGNED) const bool V_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_MT_MULTI_SEQ) const bool MULTI_SEQ = false;
layout(constant_id = VKATTN_SPEC_MT_V_FROM_K) const bool V_FROM_K = false;
layout(constant_id = VKATTN_SPEC_MT_ROPE_ON_READ) const bool ROPE_ON_READ = false;  // never with V_FROM_K
layout(constant_id = VKATTN_SPEC_MT_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;
layout(constant_id = VKATTN_SPEC_MT_RESCALE_ALWAYS) const bool RESCALE_ALWAYS = false;
layout(constant_id = VKATTN_SPEC_MT_PREFETCH) const bool PREFETCH = false;  // the next tile's K and V in registers
// Without PREFETCH: a tile's K and V loads all issued into registers before any is
// converted and stored (the prefetch's code, used at once), rather than load by load.
layout(constant_id = VKATTN_SPEC_MT_STAGE_BATCH) const bool STAGE_BATCH = false;
#endif
