// vkattn-info: every Vulkan device with the limits vkattn depends on, which one would be
// chosen (VKATTN_DEVICE and the type preference applied), or why none can be, and whether
// the matrix kernels would use its matrix units (VKATTN_MATRIX applied), with the
// cooperative-matrix shapes it lists.
// vkattn-info --version prints the library's version.
#include <cstdio>
#include <cstring>
#include <exception>

#include "vkattn/vkattn.hpp"

namespace {

const char* yes(bool b) { return b ? "yes" : "no"; }

// The matrix path as decided (VKATTN_MATRIX applied), then the device's cooperative-matrix
// list, the shape the kernels use marked.
void print_matrix(const vkattn::DeviceInfo& d) {
  const vkattn::DeviceLimits& l = d.limits;
  if (l.matrix_units) {
    std::printf("    matrix units: on\n");
  } else {
    std::printf("    matrix units: off, %s\n", d.matrix_note.c_str());
  }
  if (d.matrix_shapes.empty()) {
    std::printf("    cooperative-matrix shapes: none\n");
    return;
  }
  // The kernels take 16x16x16, else 8x8x8 (four to a tile), of f16 x f16 + f32 -> f32.
  const auto side = [](const vkattn::MatrixShape& m) {
    const bool types =
        m.a == "f16" && m.b == "f16" && m.c == "f32" && m.result == "f32" && m.scope == "subgroup" && !m.saturating;
    return types && m.m == m.n && m.n == m.k && (m.m == 16 || m.m == 8) ? m.m : 0u;
  };
  unsigned best = 0;
  for (const auto& m : d.matrix_shapes) best = side(m) > best ? side(m) : best;
  std::printf("    cooperative-matrix shapes (M x N x K, A x B + C -> result, scope):\n");
  for (const auto& m : d.matrix_shapes) {
    const bool used = best != 0 && side(m) == best;
    std::printf("      %ux%ux%u %s x %s + %s -> %s, %s%s%s\n", m.m, m.n, m.k, m.a.c_str(), m.b.c_str(), m.c.c_str(),
                m.result.c_str(), m.scope.c_str(), m.saturating ? ", saturating" : "", used ? "  (the kernels' shape)" : "");
  }
}

void print_device(const vkattn::DeviceInfo& d) {
  const vkattn::DeviceLimits& l = d.limits;
  std::printf("%s device %u: %s (%s)\n", d.chosen ? "*" : " ", d.index, d.name.c_str(), d.type.c_str());
  std::printf("    Vulkan %s, driver %s\n", d.api_version.c_str(), d.driver.c_str());
  if (!d.rejected.empty()) {
    std::printf("    rejected: %s\n", d.rejected.c_str());
    return;
  }
  std::printf("    subgroup size %u (%u to %u), arithmetic %s, shuffle %s, vote %s, size control %s\n", l.subgroup_size,
              l.subgroup_min_size, l.subgroup_max_size, yes(l.subgroup_arithmetic), yes(l.subgroup_shuffle), yes(l.subgroup_vote),
              yes(l.subgroup_size_control));
  if (l.compute_units) {
    std::printf("    compute units %u\n", l.compute_units);
  } else {
    std::printf("    compute units: not reported\n");
  }
  std::printf("    shared memory %u B, workgroup invocations %u, size %u x %u x %u\n", l.max_shared_memory,
              l.max_workgroup_invocations, l.max_workgroup_size[0], l.max_workgroup_size[1], l.max_workgroup_size[2]);
  std::printf("    workgroup count %u x %u x %u\n", l.max_workgroup_count[0], l.max_workgroup_count[1], l.max_workgroup_count[2]);
  std::printf("    storage buffers per kernel %u\n", l.max_storage_buffers);
  std::printf("    maxStorageBufferRange %llu B, device-local heap %llu MiB, unified memory %s\n",
              static_cast<unsigned long long>(l.max_storage_buffer_range),
              static_cast<unsigned long long>(l.device_local_bytes >> 20), yes(l.unified_memory));
  std::printf("    maxTexelBufferElements %llu (16-byte texels; 0: texel reads off)\n",
              static_cast<unsigned long long>(l.max_texel_buffer_elements));
  std::printf("    16-bit storage %s, fp16 math %s, timestamps %s (%.3g ns/tick)\n", yes(l.storage_16bit), yes(l.shader_float16),
              yes(l.timestamps), l.timestamp_period_ns);
  print_matrix(d);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("vkattn %s\n", vkattn::version());
    return 0;
  }
  const bool help = argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0);
  if (argc > 1) {  // asked for, the usage is the answer; otherwise a mistake
    std::fprintf(help ? stdout : stderr, "usage: vkattn-info [--version]\n");
    return help ? 0 : 2;
  }
  try {
    const auto devices = vkattn::list_devices();
    std::printf("%zu Vulkan device(s); * marks the one vkattn would use\n", devices.size());
    bool chosen = false;
    for (const auto& d : devices) {
      print_device(d);
      chosen = chosen || d.chosen;
    }
    if (!chosen) {
      // make_backend explains why none fits (or why VKATTN_DEVICE matches nothing).
      try {
        vkattn::make_backend(vkattn::BackendKind::vulkan);
      } catch (const std::exception& e) {
        std::printf("no device would be chosen: %s\n", e.what());
      }
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vkattn-info: %s\n", e.what());
    return 1;
  }
}
