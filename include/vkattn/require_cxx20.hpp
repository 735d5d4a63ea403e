// Included first by every C++ header, so a C++17 build stops here with a message naming
// the way out rather than deep inside std::span or a designated initializer.
// (GCC 10 and clang 10 give C++20 201709L and 201707L: only C++17 and older are refused.)
#pragma once

#if (defined(_MSVC_LANG) ? _MSVC_LANG : __cplusplus) <= 201703L
#error "vkattn's C++ headers need C++20 (-std=c++20); from C++17 use the C API, vkattn/vkattn.h"
#endif
