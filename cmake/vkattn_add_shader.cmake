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
# spirv-opt -O: the drivers' own optimizers differ (llvmpipe's and mobile ones do less);
# docs/kernel-shapes.md has what it changes. OFF to compare.
option(VKATTN_SPIRV_OPT "Optimize the kernels' SPIR-V with spirv-opt -O" ON)
if(VKATTN_SPIRV_OPT)
  find_program(VKATTN_SPIRV_OPT_EXE spirv-opt)
  if(NOT VKATTN_SPIRV_OPT_EXE)
    message(FATAL_ERROR "spirv-opt not found: install the Debian package 'spirv-tools' (or -DVKATTN_SPIRV_OPT=OFF)")
  endif()
endif()
set(VKATTN_SPV_TO_HEADER ${CMAKE_CURRENT_LIST_DIR}/vkattn_spv_to_header.cmake)

# vkattn_add_shader(NAME <kernel> SOURCE <file.comp> [DEFINES A=1 B ...])
# Writes <build>/shaders/<kernel>.spv (optimized unless VKATTN_SPIRV_OPT is off, then
# validated), <kernel>.h (the same words as a uint32 array named vkattn_spv_<kernel>) and,
# when spirv-dis exists, <kernel>.spvasm for review. The depfile makes an edit to any
# included file rebuild every kernel that includes it: glslang names the unoptimized .spv
# in it, so that file comes first among the outputs (Makefiles give the depfile's
# dependencies to the first output only; listed after the .spv, an edited include
# rebuilt nothing).
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
  set(unopt ${out_dir}/${S_NAME}.unopt.spv)
  if(VKATTN_SPIRV_OPT)
    set(opt_cmd COMMAND ${VKATTN_SPIRV_OPT_EXE} -O --target-env=vulkan1.1 ${unopt} -o ${spv})
  else()
    set(opt_cmd COMMAND ${CMAKE_COMMAND} -E copy ${unopt} ${spv})
  endif()
  add_custom_command(
    OUTPUT ${unopt} ${spv} ${hdr}
    COMMAND ${VKATTN_GLSLANG} ${common_args} --quiet --depfile ${out_dir}/${S_NAME}.d -o ${unopt} ${S_SOURCE}
    ${opt_cmd}
    COMMAND ${VKATTN_SPIRV_VAL} --target-env vulkan1.1 ${spv}
    COMMAND ${CMAKE_COMMAND} -DSPV=${spv} -DHDR=${hdr} -DNAME=vkattn_spv_${S_NAME} -P ${VKATTN_SPV_TO_HEADER}
    ${dis_cmd}
    DEPENDS ${S_SOURCE} ${VKATTN_SPV_TO_HEADER}
    DEPFILE ${out_dir}/${S_NAME}.d
    COMMENT "SPIR-V ${S_NAME}"
    VERBATIM)
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_HEADERS ${hdr})
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_NAMES ${S_NAME})
  if(NOT S_DEFINES)
    set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_PLAIN_SOURCES ${S_SOURCE})
  endif()
endfunction()

# vkattn_add_remaining_shaders(DIR <dir>): every <name>.comp in <dir> whose variant without
# defines no vkattn_add_shader() line compiled becomes kernel <name>, so a kernel needs a
# line only for its variants with defines (or a name other than its file's).
function(vkattn_add_remaining_shaders)
  cmake_parse_arguments(S "" "DIR" "" ${ARGN})
  file(GLOB comps CONFIGURE_DEPENDS ${S_DIR}/*.comp)
  list(SORT comps)
  get_property(done GLOBAL PROPERTY VKATTN_SHADER_PLAIN_SOURCES)
  foreach(c IN LISTS comps)
    if(NOT c IN_LIST done)
      get_filename_component(name ${c} NAME_WE)
      vkattn_add_shader(NAME ${name} SOURCE ${c})
    endif()
  endforeach()
endfunction()
