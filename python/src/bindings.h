// Shared by the extension's binding files (module.cpp: the process group; hooks_module.cpp: the
// DDP comm hooks' compressor).
#pragma once

#include <pybind11/pybind11.h>

#include <torch/csrc/utils/pybind.h>

#include "lowcomm/c10d/process_group.h"

namespace lowcomm::py {

using torchdist::ProcessGroupLowcomm;

// The lowcomm group behind `pg`; Python TypeError naming the backend when it is another one.
ProcessGroupLowcomm& lowcommGroup(const c10::intrusive_ptr<c10d::ProcessGroup>& pg);

void bindHooks(pybind11::module& m);

}  // namespace lowcomm::py
