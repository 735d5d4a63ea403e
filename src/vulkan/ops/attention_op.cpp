// Host side of the three attention stages.
#include "common/shape_math.hpp"
#include "vulkan/check.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

Dispatch attn_scores_dispatch(const Context&, ParamArena&, std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>,
                              std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>, const ScoresParams&) {
  throw Error(ErrorCode::unsupported, "attention kernels are being written", "", 0, "attn_scores");
}
Dispatch attn_softmax_dispatch(const Context&, ParamArena&, std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>,
                               const std::vector<float>&) {
  throw Error(ErrorCode::unsupported, "attention kernels are being written", "", 0, "attn_softmax");
}
Dispatch attn_weighted_sum_dispatch(const Context&, std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>,
                                    std::shared_ptr<TensorImpl>) {
  throw Error(ErrorCode::unsupported, "attention kernels are being written", "", 0, "attn_weighted_sum");
}

}  // namespace vkattn::detail
