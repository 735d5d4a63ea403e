# The matrix kernels (VK_KHR_cooperative_matrix) need a glslangValidator that knows
# GL_KHR_cooperative_matrix (glslang 13.0 and later; Debian 12 has 12.0). Configure
# compiles cmake/coopmat_probe.comp with, in order: VKATTN_COOPMAT_GLSLANG when set (it
# must then pass), the glslangValidator found for the other kernels, and the one
# tools/glslang.sh builds into .tools/glslang/ (tools/install-deps.sh runs it). The first
# that compiles it builds the matrix kernels; with none, the build goes on without them
# and says so here. VKATTN_HAVE_COOPMAT_SHADERS tells the rest of the build (and the host,
# as a compile definition) which it is. glslang runs on the build machine, so cross builds
# use it as they use the other one.
set(VKATTN_COOPMAT_GLSLANG "$ENV{VKATTN_COOPMAT_GLSLANG}"
    CACHE FILEPATH "A glslangValidator that compiles GL_KHR_cooperative_matrix (default: the system's, else .tools/glslang's)")
option(VKATTN_COOPMAT_SHADERS "Build the matrix kernels when a glslangValidator can compile them" ON)
# CI's: a build without the matrix kernels (a failed fetch of glslang's source) fails
# rather than testing less.
option(VKATTN_REQUIRE_COOPMAT_SHADERS "Fail configure when the matrix kernels cannot be built" OFF)

set(VKATTN_HAVE_COOPMAT_SHADERS OFF)
set(VKATTN_COOPMAT_GLSLANG_EXE "")
set(vkattn_coopmat_why "")
set(vkattn_coopmat_hint "run tools/install-deps.sh (Debian) or set VKATTN_COOPMAT_GLSLANG to a glslangValidator of 13.0 or later")
if(NOT VKATTN_COOPMAT_SHADERS)
  set(vkattn_coopmat_why "VKATTN_COOPMAT_SHADERS is OFF")
  set(vkattn_coopmat_hint "")
else()
  if(VKATTN_COOPMAT_GLSLANG)
    set(vkattn_candidates ${VKATTN_COOPMAT_GLSLANG})
  else()
    set(vkattn_candidates ${VKATTN_GLSLANG})
    set(vkattn_fetched ${CMAKE_CURRENT_LIST_DIR}/../.tools/glslang/bin/glslangValidator)
    if(EXISTS ${vkattn_fetched})
      get_filename_component(vkattn_fetched ${vkattn_fetched} REALPATH)
      list(APPEND vkattn_candidates ${vkattn_fetched})
    endif()
  endif()
  foreach(vkattn_candidate IN LISTS vkattn_candidates)
    execute_process(
      COMMAND ${vkattn_candidate} --quiet --target-env vulkan1.2 -o ${PROJECT_BINARY_DIR}/coopmat_probe.spv
              ${CMAKE_CURRENT_LIST_DIR}/coopmat_probe.comp
      RESULT_VARIABLE vkattn_probe_result OUTPUT_VARIABLE vkattn_probe_output ERROR_VARIABLE vkattn_probe_output)
    if(vkattn_probe_result EQUAL 0)
      set(VKATTN_COOPMAT_GLSLANG_EXE ${vkattn_candidate})
      set(VKATTN_HAVE_COOPMAT_SHADERS ON)
      break()
    endif()
    string(REGEX REPLACE "\n.*" "" vkattn_probe_output "${vkattn_probe_output}")
    string(REPLACE ";" "," vkattn_probe_output "${vkattn_probe_output}")
    list(APPEND vkattn_coopmat_why "${vkattn_candidate}: ${vkattn_probe_output}")
  endforeach()
  if(VKATTN_COOPMAT_GLSLANG AND NOT VKATTN_HAVE_COOPMAT_SHADERS)
    message(FATAL_ERROR "VKATTN_COOPMAT_GLSLANG=${VKATTN_COOPMAT_GLSLANG} cannot compile GL_KHR_cooperative_matrix "
                        "(${vkattn_coopmat_why}): point it at a glslangValidator of 13.0 or later, or leave it empty")
  endif()
  list(JOIN vkattn_coopmat_why "; " vkattn_coopmat_why)
endif()
if(VKATTN_REQUIRE_COOPMAT_SHADERS AND NOT VKATTN_HAVE_COOPMAT_SHADERS)
  message(FATAL_ERROR "vkattn: matrix kernels: NOT built (${vkattn_coopmat_why}), and VKATTN_REQUIRE_COOPMAT_SHADERS is ON; "
                      "${vkattn_coopmat_hint}")
endif()
# The kernels on NV cooperative matrices 2 (attn_mt2.comp) need GL_NV_cooperative_matrix2
# too, which the same glslang compiles from 15.0 on; without it they are left out and the
# KHR kernels serve every device (VKATTN_HAVE_COOPMAT2_SHADERS).
set(VKATTN_HAVE_COOPMAT2_SHADERS OFF)
if(VKATTN_HAVE_COOPMAT_SHADERS)
  execute_process(
    COMMAND ${VKATTN_COOPMAT_GLSLANG_EXE} --quiet --target-env vulkan1.3 -o ${PROJECT_BINARY_DIR}/coopmat2_probe.spv
            ${CMAKE_CURRENT_LIST_DIR}/coopmat2_probe.comp
    RESULT_VARIABLE vkattn_probe_result OUTPUT_QUIET ERROR_QUIET)
  if(vkattn_probe_result EQUAL 0)
    set(VKATTN_HAVE_COOPMAT2_SHADERS ON)
  endif()
endif()
if(VKATTN_HAVE_COOPMAT_SHADERS)
  execute_process(COMMAND ${VKATTN_COOPMAT_GLSLANG_EXE} --version OUTPUT_VARIABLE vkattn_glslang_version ERROR_QUIET)
  string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" vkattn_glslang_version "${vkattn_glslang_version}")
  if(VKATTN_HAVE_COOPMAT2_SHADERS)
    set(vkattn_coopmat2_said "with NV cooperative matrices 2")
  else()
    set(vkattn_coopmat2_said "KHR only: it cannot compile GL_NV_cooperative_matrix2")
  endif()
  message(STATUS "vkattn: matrix kernels: built with ${VKATTN_COOPMAT_GLSLANG_EXE} (glslang ${vkattn_glslang_version}), "
                 "${vkattn_coopmat2_said}")
elseif(vkattn_coopmat_hint)
  message(STATUS "vkattn: matrix kernels: NOT built, no glslangValidator compiles GL_KHR_cooperative_matrix "
                 "(${vkattn_coopmat_why}); ${vkattn_coopmat_hint}")
else()
  message(STATUS "vkattn: matrix kernels: NOT built (${vkattn_coopmat_why})")
endif()
