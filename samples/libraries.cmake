# Code the samples and the tests share: the llama2.c model and the figure drawing. Included
# from samples/ and, when the samples are off, from tests/.
if(NOT TARGET vkattn_llama2c)
  add_library(vkattn_llama2c STATIC ${CMAKE_CURRENT_LIST_DIR}/llama2c.cpp)
  target_include_directories(vkattn_llama2c PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(vkattn_llama2c PUBLIC vkattn::vkattn PRIVATE vkattn_warnings)
  # Where the shipped default model lives; VKATTN_MODEL_DIR in the environment overrides it.
  target_compile_definitions(vkattn_llama2c PRIVATE VKATTN_MODEL_DIR="${PROJECT_SOURCE_DIR}/models")

  find_package(PNG)
  if(NOT PNG_FOUND)
    message(FATAL_ERROR "libpng not found: install the Debian package libpng-dev (tools/install-deps.sh does)")
  endif()
  add_library(vkattn_figures STATIC ${CMAKE_CURRENT_LIST_DIR}/figures/canvas.cpp
                                    ${CMAKE_CURRENT_LIST_DIR}/figures/attention_figures.cpp)
  target_include_directories(vkattn_figures PUBLIC ${CMAKE_CURRENT_LIST_DIR}/figures)
  target_link_libraries(vkattn_figures PUBLIC vkattn_llama2c PRIVATE PNG::PNG vkattn_warnings)
endif()
