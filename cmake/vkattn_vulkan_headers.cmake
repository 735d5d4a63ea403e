# The Vulkan headers as the target vkattn::vulkan_headers: FindVulkan's Vulkan::Headers
# where it finds them, else the folder holding vulkan/vulkan.h (VKATTN_VULKAN_INCLUDE_DIR;
# cross builds point it at a folder with only the Vulkan headers in it). The loader itself
# is found at run time (src/vulkan/loader.cpp), so no Vulkan library is needed to build.
if(NOT TARGET vkattn::vulkan_headers)
  find_package(Vulkan QUIET)
  add_library(vkattn::vulkan_headers INTERFACE IMPORTED)
  if(TARGET Vulkan::Headers AND NOT VKATTN_VULKAN_INCLUDE_DIR)
    target_link_libraries(vkattn::vulkan_headers INTERFACE Vulkan::Headers)
  else()
    find_path(VKATTN_VULKAN_INCLUDE_DIR vulkan/vulkan.h)
    if(NOT VKATTN_VULKAN_INCLUDE_DIR)
      message(FATAL_ERROR "vkattn needs the Vulkan headers (vulkan/vulkan.h): install them (Debian: "
                          "libvulkan-dev) or set VKATTN_VULKAN_INCLUDE_DIR to the folder that holds vulkan/")
    endif()
    set_target_properties(vkattn::vulkan_headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${VKATTN_VULKAN_INCLUDE_DIR}")
  endif()
endif()
