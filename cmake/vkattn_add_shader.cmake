# Build-time SPIR-V. A shader that fails to compile fails the build; a missing compiler
# fails configure (a silently missing compiler once shipped wrong output elsewhere:
# llama.cpp #8365).
find_program(VKATTN_GLSLANG glslangValidator)
if(NOT VKATTN_GLSLANG)
  message(FATAL_ERROR "glslangValidator not found: install the Debian package 'glslang-tools'")
endif()
find_program(VKATTN_SPIRV_VAL spirv-val)
if(NOT VKATTN_SPIRV_VAL)
  message(FATAL_ERROR "spirv-val not found: install the Debian package 'spirv-tools'")
endif()
find_program(VKATTN_SPIRV_DIS spirv-dis)

# vkattn_add_shader(NAME <kernel> SOURCE <file.comp> [DEFINES A=1 B ...])
# Writes <build>/shaders/<kernel>.spv (validated), <kernel>.h (uint32 array named
# vkattn_spv_<kernel>) and, when spirv-dis exists, <kernel>.spvasm for review. The depfile
# makes an edit to any included file rebuild every kernel that includes it.
function(vkattn_add_shader)
  cmake_parse_arguments(S "" "NAME;SOURCE" "DEFINES" ${ARGN})
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR})
  set(spv ${out_dir}/${S_NAME}.spv)
  set(hdr ${out_dir}/${S_NAME}.h)
  set(defs "")
  foreach(d IN LISTS S_DEFINES)
    list(APPEND defs -D${d})
  endforeach()
  set(common_args --target-env vulkan1.1 -I${CMAKE_CURRENT_SOURCE_DIR}/common ${defs})
  set(dis_cmd "")
  if(VKATTN_SPIRV_DIS)
    set(dis_cmd COMMAND ${VKATTN_SPIRV_DIS} ${spv} -o ${out_dir}/${S_NAME}.spvasm)
  endif()
  add_custom_command(
    OUTPUT ${spv} ${hdr}
    COMMAND ${VKATTN_GLSLANG} ${common_args} --quiet --depfile ${out_dir}/${S_NAME}.d
            -o ${spv} ${S_SOURCE}
    COMMAND ${VKATTN_SPIRV_VAL} --target-env vulkan1.1 ${spv}
    COMMAND ${VKATTN_GLSLANG} ${common_args} --quiet --vn vkattn_spv_${S_NAME} -o ${hdr} ${S_SOURCE}
    ${dis_cmd}
    DEPENDS ${S_SOURCE}
    DEPFILE ${out_dir}/${S_NAME}.d
    COMMENT "SPIR-V ${S_NAME}"
    VERBATIM)
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_HEADERS ${hdr})
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_NAMES ${S_NAME})
endfunction()
