# cmake -DCOMPILE=<vkattn_compile_shader.cmake> -DSHADERS=<shaders dir> -DWORK=<empty dir>
#       -DGLSLANG=<exe> -DOPT=<exe> -DVAL=<exe> -DDIS=<exe> -P shader_cache.cmake
# The kernels' build cache (cmake/vkattn_compile_shader.cmake): a build that finds its
# entry writes the same files, byte for byte, as a build without the cache (the depfile
# too, for the build's own paths); an edit to an included file, or other defines, miss; a
# kernel that includes a file outside the include directory is not kept; the same source
# under another kernel's name misses (its header names its array after the kernel); a
# kernel that does not compile fails the build with its name.
cmake_minimum_required(VERSION 3.22)

file(REMOVE_RECURSE ${WORK})
file(COPY ${SHADERS}/copy.comp ${SHADERS}/common DESTINATION ${WORK}/src)
set(cache ${WORK}/cache)
set(kernel k)

# build(<out dir> <kernel source> <cache dir or ""> [defines]) -> result in `rc`, messages in `log`
function(build out source cache_dir)
  file(MAKE_DIRECTORY ${out})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DKERNEL=${kernel} -DSOURCE=${source} -DOUT_DIR=${out} -DGLSLANG=${GLSLANG}
            -DTARGET_ENV=vulkan1.1 -DINCLUDE_DIR=${WORK}/src/common -DDEFINES=${ARGN} -DCACHE_DIR=${cache_dir}
            -DOPT=${OPT} -DVAL=${VAL} -DDIS=${DIS} -P ${COMPILE}
    RESULT_VARIABLE r OUTPUT_VARIABLE o ERROR_VARIABLE e)
  set(rc ${r} PARENT_SCOPE)
  set(log "${o}${e}" PARENT_SCOPE)
endfunction()

function(expect_built out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building into ${out} failed (${rc}): ${log}")
  endif()
endfunction()

# The files of |out| equal those of |ref|, the depfile's paths read for |out|'s.
function(expect_same out ref)
  foreach(ext unopt.spv spv h spvasm)
    if(NOT EXISTS ${ref}/k.${ext} AND ext STREQUAL "spvasm")
      continue()  # no spirv-dis
    endif()
    file(SHA256 ${out}/k.${ext} a)
    file(SHA256 ${ref}/k.${ext} b)
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "${out}/k.${ext} differs from ${ref}/k.${ext}")
    endif()
  endforeach()
  file(READ ${out}/k.d a)
  file(READ ${ref}/k.d b)
  string(REPLACE "${ref}/" "${out}/" b "${b}")
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "depfile ${out}/k.d:\n${a}\ndiffers from ${ref}/k.d:\n${b}")
  endif()
endfunction()

function(expect_entries n why)
  file(GLOB entries LIST_DIRECTORIES true ${cache}/*)
  list(LENGTH entries have)
  if(NOT have EQUAL n)
    message(FATAL_ERROR "${why}: ${have} cache entries, expected ${n}: ${entries}")
  endif()
endfunction()

set(copy ${WORK}/src/copy.comp)
build(${WORK}/plain ${copy} "")
expect_built(plain)
expect_entries(0 "a build without a cache directory")

build(${WORK}/miss ${copy} ${cache})
expect_built(miss)
expect_same(${WORK}/miss ${WORK}/plain)
expect_entries(1 "the first build with the cache")

# A hit: the files come from the entry (marked here, to tell), the rest byte for byte.
file(GLOB entry LIST_DIRECTORIES true ${cache}/*)
file(APPEND ${entry}/h "// from the cache\n")
build(${WORK}/hit ${copy} ${cache})
expect_built(hit)
file(READ ${WORK}/hit/k.h text)
if(NOT text MATCHES "// from the cache\n$")
  message(FATAL_ERROR "the second build compiled again instead of taking the cache's entry")
endif()
file(COPY_FILE ${WORK}/plain/k.h ${WORK}/hit/k.h)
expect_same(${WORK}/hit ${WORK}/plain)

# What the key covers: other defines; an edit to an included file.
build(${WORK}/texel ${copy} ${cache} VKATTN_TEXEL=1)
expect_built(texel)
expect_entries(2 "a build with other defines")
file(APPEND ${WORK}/src/common/layout.glsl "// edited\n")
build(${WORK}/edited ${copy} ${cache})
expect_built(edited)
expect_entries(3 "a build after an included file changed")
expect_same(${WORK}/edited ${WORK}/plain)  # a comment: the same module
set(kernel other)
build(${WORK}/renamed ${copy} ${cache})
expect_built(renamed)
expect_entries(4 "the same source under another kernel name")
file(READ ${WORK}/renamed/other.h text)
if(NOT text MATCHES "vkattn_spv_other\\[\\]")
  message(FATAL_ERROR "the header of kernel 'other' does not name its array vkattn_spv_other")
endif()
set(kernel k)

# An include found beside the source, outside the include directory: built, not kept.
file(WRITE ${WORK}/src/beside.glsl "// beside the source\n")
file(READ ${copy} text)
string(REPLACE "#include \"params.h\"" "#include \"params.h\"\n#include \"beside.glsl\"" text "${text}")
file(WRITE ${WORK}/src/beside.comp "${text}")
build(${WORK}/beside ${WORK}/src/beside.comp ${cache})
expect_built(beside)
expect_entries(4 "a kernel with an include outside the include directory")

# A kernel that does not compile fails, naming itself, and leaves no entry.
file(WRITE ${WORK}/src/broken.comp "#version 450\nvoid main() { undeclared = 1; }\n")
build(${WORK}/broken ${WORK}/src/broken.comp ${cache})
if(rc EQUAL 0 OR NOT log MATCHES "kernel k: glslang failed")
  message(FATAL_ERROR "a kernel that does not compile: rc ${rc}, ${log}")
endif()
expect_entries(4 "a kernel that does not compile")
message(STATUS "shader cache: hit, misses and refusals as expected")
file(REMOVE_RECURSE ${WORK})
