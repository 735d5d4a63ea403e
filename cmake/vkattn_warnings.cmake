# Warnings live on an INTERFACE target so they never leak into a consumer's build.
add_library(vkattn_warnings INTERFACE)
if(MSVC)
  target_compile_options(vkattn_warnings INTERFACE /W4 $<$<BOOL:${VKATTN_WERROR}>:/WX>)
else()
  target_compile_options(vkattn_warnings INTERFACE -Wall -Wextra -Wpedantic
    $<$<BOOL:${VKATTN_WERROR}>:-Werror>)
endif()
