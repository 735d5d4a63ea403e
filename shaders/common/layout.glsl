// Shared by every kernel: workgroup size from specialization constant 0 (params.h:
// VKATTN_SPEC_WG_SIZE; layout.glsl comes before params.h in some kernels), and the
// linear workgroup id of a grid the host folded into x/y/z so that no dimension exceeds
// maxComputeWorkGroupCount (see fold_grid() in src/vulkan/dispatch.cpp).
#ifndef VKATTN_LAYOUT_GLSL
#define VKATTN_LAYOUT_GLSL

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
// The workgroup size again, as a plain specialization constant of the same id: shared
// arrays are sized by it rather than by gl_WorkGroupSize, which older SPIRV-Cross
// (MoltenVK) mis-sized.
layout(constant_id = 0) const uint WG_SIZE = 64;

// A constant a kernel's lean twin (VKATTN_LEAN: shaders/CMakeLists.txt) fixes at its
// default: a specialization constant in the full module, a plain one in the twin, which
// then leaves out the code for every other value.
#ifdef VKATTN_LEAN
#define LEAN_FIXED(id)
#else
#define LEAN_FIXED(id) layout(constant_id = id)
#endif

uint wg_linear_id() {
    return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x
         + gl_WorkGroupID.x;
}

#endif
