// The C++ API as vkattn/vkattn.hpp has it, less vkattn/version.hpp: that header changes
// with every version, and a test that does not check the version need not be rebuilt then
// (ccache keeps the rest of CI's builds).
#pragma once

#include "vkattn/backend.hpp"
#include "vkattn/command_list.hpp"
#include "vkattn/error.hpp"
#include "vkattn/kv_cache.hpp"
#include "vkattn/tensor.hpp"
#include "vkattn/types.hpp"
