# cmake -DKERNEL=<name> -DSOURCE=<file.comp> -DOUT_DIR=<dir> -DGLSLANG=<exe> -DTARGET_ENV=<env>
#       -DINCLUDE_DIR=<dir> [-DDEFINES=A=1,B] [-DOPT=<spirv-opt>] [-DVAL=<spirv-val>]
#       [-DDIS=<spirv-dis>] [-DCACHE_DIR=<dir>] -P vkattn_compile_shader.cmake
# One kernel's build (vkattn_add_shader.cmake): OUT_DIR/KERNEL.unopt.spv from glslang (and
# KERNEL.d, its depfile), KERNEL.spv (optimized with OPT, else the same module), validated
# with VAL, KERNEL.h (its words as `const uint32_t vkattn_spv_KERNEL[]`, the format of
# glslang's --vn, so that the header holds exactly the validated module) and, with DIS,
# KERNEL.spvasm for review.
#
# With CACHE_DIR, the results are kept there under a key of everything that makes them:
# this script, the tools (size and time of each executable), the arguments, and the
# contents of the source and of every file in INCLUDE_DIR. A build that finds its key
# copies the files instead of running the tools (about 1 s of a core for a large kernel).
# Why: CI builds the kernels in nine builds of one run (the README build, the sanitizer,
# clang and cross builds, the consumers), about 17 s of its two cores each. A result is
# kept only when glslang's depfile names no file outside the source and INCLUDE_DIR, so a
# key covers every input; an entry is complete once its `deps` file exists (written last,
# the entry then renamed into place), so builds running side by side never see half of
# one.
cmake_minimum_required(VERSION 3.22)

set(base ${OUT_DIR}/${KERNEL})
set(outputs unopt.spv spv h)
if(DIS)
  list(APPEND outputs spvasm)
endif()
string(REPLACE "," ";" defines "${DEFINES}")
set(defs "")
foreach(d IN LISTS defines)
  list(APPEND defs -D${d})
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " line)
    message(FATAL_ERROR "kernel ${KERNEL}: ${what} failed (${rc}): ${line}")
  endif()
endfunction()

# Little-endian bytes b0 b1 b2 b3 -> the word 0xb3b2b1b0.
function(write_header spv hdr)
  file(READ ${spv} hex HEX)
  string(LENGTH "${hex}" n)
  math(EXPR rem "${n} % 8")
  if(n EQUAL 0 OR NOT rem EQUAL 0)
    message(FATAL_ERROR "${spv}: not a SPIR-V module (${n} hex digits)")
  endif()
  string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])"
         "0x\\4\\3\\2\\1," words "${hex}")
  file(WRITE ${hdr} "#pragma once\nconst uint32_t vkattn_spv_${KERNEL}[] = {\n\t${words}\n};\n")
endfunction()

function(write_depfile deps)
  set(line "${base}.unopt.spv: ${SOURCE}")
  foreach(d IN LISTS deps)
    string(APPEND line " ${INCLUDE_DIR}/${d}")
  endforeach()
  file(WRITE ${base}.d "${line}\n")
endfunction()

set(entry "")
if(CACHE_DIR)
  file(SHA256 ${CMAKE_CURRENT_LIST_FILE} h)
  # The kernel's name too: the header names its array after it.
  set(id "script ${h}\nkernel ${KERNEL}\nenv ${TARGET_ENV}\ndefines ${DEFINES}\n")
  foreach(tool GLSLANG OPT VAL DIS)
    if(${tool})
      file(SIZE ${${tool}} size)
      file(TIMESTAMP ${${tool}} time "%s" UTC)
      string(APPEND id "${tool} ${size} ${time}\n")  # not the path: clones at other paths share
    endif()
  endforeach()
  file(SHA256 ${SOURCE} h)
  string(APPEND id "source ${h}\n")
  file(GLOB includes LIST_DIRECTORIES false RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/*)
  list(SORT includes)
  foreach(f IN LISTS includes)
    file(SHA256 ${INCLUDE_DIR}/${f} h)
    string(APPEND id "include ${f} ${h}\n")
  endforeach()
  string(SHA256 key "${id}")
  set(entry ${CACHE_DIR}/${key})
  if(EXISTS ${entry}/deps)
    foreach(ext IN LISTS outputs)
      file(COPY_FILE ${entry}/${ext} ${base}.${ext})
      file(TOUCH ${base}.${ext})  # newer than the inputs, for make
    endforeach()
    file(STRINGS ${entry}/deps deps)
    write_depfile("${deps}")
    file(TOUCH ${entry}/deps)  # used: for whoever prunes the cache by age
    return()
  endif()
endif()

run(glslang ${GLSLANG} --target-env ${TARGET_ENV} -I${INCLUDE_DIR} ${defs} --quiet --depfile ${base}.d
    -o ${base}.unopt.spv ${SOURCE})
if(OPT)
  run(spirv-opt ${OPT} -O --target-env=${TARGET_ENV} ${base}.unopt.spv -o ${base}.spv)
else()
  file(COPY_FILE ${base}.unopt.spv ${base}.spv)
endif()
if(VAL)
  run(spirv-val ${VAL} --target-env ${TARGET_ENV} ${base}.spv)
endif()
write_header(${base}.spv ${base}.h)
if(DIS)
  run(spirv-dis ${DIS} ${base}.spv -o ${base}.spvasm)
endif()

if(NOT entry)
  return()
endif()
# glslang's depfile: "<target>: <source> <include> ...", the includes as absolute paths.
file(READ ${base}.d depfile)
string(REGEX REPLACE "^[^:]*: " "" depfile "${depfile}")
string(REGEX REPLACE "[ \t\r\n\\\\]+" ";" depfile "${depfile}")
set(deps "")
foreach(d IN LISTS depfile)
  if(d STREQUAL "" OR d STREQUAL SOURCE)
    continue()
  endif()
  file(RELATIVE_PATH rel ${INCLUDE_DIR} ${d})
  if(rel MATCHES "/" OR NOT EXISTS ${INCLUDE_DIR}/${rel})
    return()  # an input the key does not cover: not kept
  endif()
  list(APPEND deps ${rel})
endforeach()
string(RANDOM LENGTH 12 tag)
set(tmp ${entry}.tmp-${tag})
file(MAKE_DIRECTORY ${tmp})
foreach(ext IN LISTS outputs)
  file(COPY_FILE ${base}.${ext} ${tmp}/${ext})
endforeach()
list(JOIN deps "\n" deps)
file(WRITE ${tmp}/deps "${deps}\n")
# rename(2) of a directory fails when the target exists and is not empty: another build
# stored the same entry first. (NO_REPLACE would say so too, but some file systems refuse
# the call it makes.)
file(RENAME ${tmp} ${entry} RESULT renamed)
if(NOT renamed EQUAL 0)
  file(REMOVE_RECURSE ${tmp})
endif()
