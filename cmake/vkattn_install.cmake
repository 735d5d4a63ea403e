# Install rules: headers (the generated version and export headers included), the library,
# the CMake package (vkattnConfig.cmake, vkattnConfigVersion.cmake, vkattnTargets.cmake with
# vkattn::vkattn) and vkattn.pc; and the build tree's own package. SPIR-V is embedded in the
# library, so nothing else is needed at run time but a Vulkan loader and driver.
include(CMakePackageConfigHelpers)

install(TARGETS vkattn EXPORT vkattnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/vkattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${VKATTN_GENERATED_INCLUDE}/vkattn/version.h ${VKATTN_GENERATED_INCLUDE}/vkattn/version.hpp
              ${VKATTN_GENERATED_INCLUDE}/vkattn/export.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/vkattn)

set(vkattn_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/vkattn)
install(EXPORT vkattnTargets NAMESPACE vkattn:: DESTINATION ${vkattn_cmake_dir})
get_target_property(vkattn_library_type vkattn TYPE)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/vkattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/vkattnConfig.cmake INSTALL_DESTINATION ${vkattn_cmake_dir})
# Before 1.0 a minor release may change the ABI (the SONAME carries the minor version too),
# so a request is met by the same minor version only; from 1.0 on, by the same major one.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(vkattn_compatibility SameMinorVersion)
else()
  set(vkattn_compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/vkattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${vkattn_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/vkattnConfig.cmake ${PROJECT_BINARY_DIR}/vkattnConfigVersion.cmake
        DESTINATION ${vkattn_cmake_dir})
# The build tree is a package too (vkattn_DIR=<build>, or the build in CMAKE_PREFIX_PATH): the
# same two files sit at its top, beside these targets, whose include directories are the
# source's and the generated ones. Not for a subproject, whose parent owns its exports.
if(PROJECT_IS_TOP_LEVEL)
  export(EXPORT vkattnTargets NAMESPACE vkattn:: FILE ${PROJECT_BINARY_DIR}/vkattnTargets.cmake)
endif()

# vkattn.pc, relocatable: the prefix is found from the file's own place (${pcfiledir}),
# so `cmake --install build --prefix P` works for any P.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(VKATTN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH pc_up "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" pc_up "${pc_up}")
  set(VKATTN_PC_PREFIX "\${pcfiledir}/${pc_up}")
endif()
set(VKATTN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(VKATTN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(VKATTN_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(VKATTN_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# What linking the static library needs: threads, the dynamic loader's library (the Vulkan
# loader is opened at run time), and the C++ runtime for programs linked by a C compiler
# (the C API's users); Vulkan itself (Requires.private) only with VKATTN_LINK_VULKAN.
set(VKATTN_PC_LIBS_PRIVATE "${CMAKE_THREAD_LIBS_INIT}")
foreach(lib IN LISTS CMAKE_DL_LIBS)
  string(APPEND VKATTN_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
set(VKATTN_PC_REQUIRES_PRIVATE "")
if(VKATTN_LINK_VULKAN)
  set(VKATTN_PC_REQUIRES_PRIVATE "Requires.private: vulkan\n")
endif()
foreach(lib IN LISTS CMAKE_CXX_IMPLICIT_LINK_LIBRARIES)
  if(NOT lib IN_LIST CMAKE_C_IMPLICIT_LINK_LIBRARIES)
    string(APPEND VKATTN_PC_LIBS_PRIVATE " -l${lib}")
  endif()
endforeach()
string(STRIP "${VKATTN_PC_LIBS_PRIVATE}" VKATTN_PC_LIBS_PRIVATE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/vkattn.pc.in ${PROJECT_BINARY_DIR}/vkattn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/vkattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
