// The C++ API in one include. (The C API is vkattn/vkattn.h.)
#pragma once

#include "vkattn/backend.hpp"
#include "vkattn/command_list.hpp"
#include "vkattn/error.hpp"
#include "vkattn/kv_cache.hpp"
#include "vkattn/tensor.hpp"
#include "vkattn/types.hpp"
#include "vkattn/version.hpp"
