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
set(VKATTN_COMPILE_SHADER ${CMAKE_CURRENT_LIST_DIR}/vkattn_compile_shader.cmake)
# A directory where the kernels' builds keep their results for the next build that has the
# same inputs (vkattn_compile_shader.cmake says what the key covers); empty: none. CI sets
# it (VKATTN_SHADER_CACHE_DIR in the environment), as it uses ccache, for its nine builds.
set(VKATTN_SHADER_CACHE_DIR "$ENV{VKATTN_SHADER_CACHE_DIR}" CACHE PATH
    "Directory that keeps built kernels for later builds with the same inputs (empty: none)")
include(${CMAKE_CURRENT_LIST_DIR}/vkattn_coopmat_glslang.cmake)

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
  set(opt "")
  if(VKATTN_SPIRV_OPT)
    set(opt ${VKATTN_SPIRV_OPT_EXE})
  endif()
  set(tools -DOPT=${opt} -DVAL=${VKATTN_SPIRV_VAL} -DDIS=${VKATTN_SPIRV_DIS})
  vkattn_embed_shader(${S_NAME} ${S_SOURCE} "${S_DEFINES}" ${VKATTN_GLSLANG} vulkan1.1 ${tools})
  get_filename_component(file ${S_SOURCE} NAME)
  get_property(rules GLOBAL PROPERTY VKATTN_LEAN_TWIN_${file})
  if(rules)
    # Its lean twin: not a kernel of its own but part of this kernel's entry.
    set(defines ${S_DEFINES} VKATTN_LEAN=1)
    vkattn_embed_shader(${S_NAME}_lean ${S_SOURCE} "${defines}" ${VKATTN_GLSLANG} vulkan1.1 ${tools})
    list(JOIN rules ", " rules)
    set_property(GLOBAL APPEND_STRING PROPERTY VKATTN_KERNEL_LIST "VKATTN_KERNEL_LEAN(${S_NAME}, ${rules})\n")
  else()
    set_property(GLOBAL APPEND_STRING PROPERTY VKATTN_KERNEL_LIST "VKATTN_KERNEL(${S_NAME})\n")
  endif()
endfunction()

# vkattn_lean_twin(SOURCE <file.comp> WHEN <constant id macro><=<max> ...): each kernel
# built from <file.comp> by a later vkattn_add_shader also gets a twin built with
# VKATTN_LEAN=1, which leaves out the quantized K and V loaders (tensor_load.glsl:
# TL_QUANT) and fixes the constants the kernel declares with LEAN_FIXED (layout.glsl) at
# their defaults. A pipeline whose constants (shaders/common/params.h) all meet the rules
# is built from the twin (pipeline.cpp): the same code once specialized, from a module up
# to half the size, which the driver (and the validation layer) work through whole for
# every pipeline. WHEN names the type constants of K and V (<=1: f32 or f16); each
# LEAN_FIXED constant of the .comp file adds its own rule (<=0: its default, false), read
# from the file here, so it is stated once.
function(vkattn_lean_twin)
  cmake_parse_arguments(S "" "SOURCE" "WHEN" ${ARGN})
  file(READ ${CMAKE_CURRENT_SOURCE_DIR}/${S_SOURCE} text)
  # The rules come from the file: an edit of it configures again.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${S_SOURCE})
  string(REGEX MATCHALL "LEAN_FIXED\\(([A-Z0-9_]+)\\)" fixed "${text}")
  # Only a .comp file's own LEAN_FIXED constants are read: one in a shared include would go
  # without its rule, so none may be there (checked once a configure).
  get_property(checked GLOBAL PROPERTY VKATTN_LEAN_INCLUDES_CHECKED)
  if(NOT checked)
    file(GLOB includes ${CMAKE_CURRENT_SOURCE_DIR}/common/*.glsl)
    foreach(inc IN LISTS includes)
      file(STRINGS ${inc} uses REGEX "LEAN_FIXED\\([A-Z0-9_]+\\)")
      if(uses)
        message(FATAL_ERROR "${inc}: LEAN_FIXED belongs in the .comp file that declares the constant")
      endif()
    endforeach()
    set_property(GLOBAL PROPERTY VKATTN_LEAN_INCLUDES_CHECKED TRUE)
  endif()
  set(rules "")
  foreach(w IN LISTS S_WHEN)
    if(NOT w MATCHES "^([A-Z0-9_]+)<=([0-9]+)$")
      message(FATAL_ERROR "vkattn_lean_twin(${S_SOURCE}): '${w}' is not <constant id macro><=<max>")
    endif()
    if("LEAN_FIXED(${CMAKE_MATCH_1})" IN_LIST fixed)
      message(FATAL_ERROR "vkattn_lean_twin(${S_SOURCE}): ${CMAKE_MATCH_1} is LEAN_FIXED in ${S_SOURCE}, which gives its rule")
    endif()
    list(APPEND rules "VKATTN_LEAN_RULE(${CMAKE_MATCH_1}, ${CMAKE_MATCH_2})")
  endforeach()
  foreach(f IN LISTS fixed)
    string(REGEX REPLACE "LEAN_FIXED\\(([A-Z0-9_]+)\\)" "\\1" id "${f}")
    list(APPEND rules "VKATTN_LEAN_RULE(${id}, 0)")
  endforeach()
  list(REMOVE_DUPLICATES rules)
  set_property(GLOBAL PROPERTY VKATTN_LEAN_TWIN_${S_SOURCE} ${rules})
endfunction()

# vkattn_add_coopmat_shader(NAME <kernel> SOURCE <file.comp> [DEFINES A=1 B ...])
# A matrix kernel (GL_KHR_cooperative_matrix): built only when configure found a glslang
# that compiles it (vkattn_coopmat_glslang.cmake), else left out of the kernel table, as
# the host's VKATTN_HAVE_COOPMAT_SHADERS says. Vulkan 1.2 (SPIR-V 1.5: cooperative-matrix
# modules must use the Vulkan memory model, core in 1.2). Neither optimized nor validated:
# Debian 12's spirv-opt, spirv-val and spirv-dis (SPIRV-Tools 2023.1) reject the
# CooperativeMatrixKHR capability ("Invalid capability operand: 6022"), and spirv-opt has
# miscompiled cooperative-matrix code before (llama.cpp #10763); the drivers optimize it.
# `glslangValidator -H` prints the SPIR-V of one for review. Its source is claimed either
# way, so vkattn_add_remaining_shaders never hands it to the other glslang.
# With NV2, a kernel on NV cooperative matrices 2 (GL_NV_cooperative_matrix2): built only
# where the same glslang compiles that too (VKATTN_HAVE_COOPMAT2_SHADERS), for Vulkan 1.3
# (SPIR-V 1.6, which the extension needs).
function(vkattn_add_coopmat_shader)
  cmake_parse_arguments(S "NV2" "NAME;SOURCE" "DEFINES" ${ARGN})
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_PLAIN_SOURCES ${S_SOURCE})
  if(NOT VKATTN_HAVE_COOPMAT_SHADERS OR (S_NV2 AND NOT VKATTN_HAVE_COOPMAT2_SHADERS))
    return()
  endif()
  set(env vulkan1.2)
  if(S_NV2)
    set(env vulkan1.3)
  endif()
  vkattn_embed_shader(${S_NAME} ${S_SOURCE} "${S_DEFINES}" ${VKATTN_COOPMAT_GLSLANG_EXE} ${env})
  set_property(GLOBAL APPEND_STRING PROPERTY VKATTN_KERNEL_LIST "VKATTN_KERNEL(${S_NAME})\n")
endfunction()

# The part both share: <name>.unopt.spv from |glslang| for |env|, <name>.spv and <name>.h
# by vkattn_compile_shader.cmake, with |ARGN| (its tool arguments: -DOPT=, -DVAL=,
# -DDIS=). The caller gives it its place in the kernel table (VKATTN_KERNEL_LIST).
function(vkattn_embed_shader name source defines glslang env)
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR})
  foreach(d IN LISTS defines)
    if(d MATCHES ",")
      message(FATAL_ERROR "kernel ${name}: define '${d}' has a comma, which vkattn_compile_shader.cmake splits on")
    endif()
  endforeach()
  list(JOIN defines "," defines_arg)
  set(hdr ${out_dir}/${name}.h)
  add_custom_command(
    OUTPUT ${out_dir}/${name}.unopt.spv ${out_dir}/${name}.spv ${hdr}
    COMMAND ${CMAKE_COMMAND} -DKERNEL=${name} -DSOURCE=${source} -DOUT_DIR=${out_dir} -DGLSLANG=${glslang}
            -DTARGET_ENV=${env} -DINCLUDE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/common -DDEFINES=${defines_arg}
            -DCACHE_DIR=${VKATTN_SHADER_CACHE_DIR} ${ARGN} -P ${VKATTN_COMPILE_SHADER}
    DEPENDS ${source} ${VKATTN_COMPILE_SHADER}
    DEPFILE ${out_dir}/${name}.d
    COMMENT "SPIR-V ${name}"
    VERBATIM)
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_HEADERS ${hdr})
  if(NOT defines)
    set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_PLAIN_SOURCES ${source})
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
