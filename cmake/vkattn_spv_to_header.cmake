# cmake -DSPV=<file.spv> -DHDR=<file.h> -DNAME=<array> -P vkattn_spv_to_header.cmake
# Writes the SPIR-V words of SPV as `const uint32_t NAME[]` (the format of glslang's --vn),
# so that the header holds exactly the validated (and optimized) module.
file(READ ${SPV} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR rem "${n} % 8")
if(n EQUAL 0 OR NOT rem EQUAL 0)
  message(FATAL_ERROR "${SPV}: not a SPIR-V module (${n} hex digits)")
endif()
# Bytes are little-endian words: b0 b1 b2 b3 -> 0xb3b2b1b0.
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])"
       "0x\\4\\3\\2\\1," words "${hex}")
file(WRITE ${HDR} "#pragma once\nconst uint32_t ${NAME}[] = {\n\t${words}\n};\n")
