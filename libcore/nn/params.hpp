// The parameter store: every trainable tensor with its name, shape, value and gradient, the
// one list that optimizers (AdamW here; FOAM, POET-X, SMET later) iterate over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace icmlkit::nn {

/// One trainable tensor, row-major.  `decay` marks tensors that get weight decay (matrices;
/// not norm weights).
template <class T>
struct Param {
  std::string name;            ///< checkpoint name, e.g. "blk.0.attn_q.weight"
  std::vector<int> shape;      ///< e.g. [out, in]
  std::vector<T> value, grad;  ///< both of size numel()
  bool decay = true;
  /// A frozen tensor is not trained: its gradient is empty and optimizers skip it (POET-X's base
  /// weights W0).
  bool frozen = false;
  /// Number of elements (product of shape).
  std::size_t numel() const noexcept { return value.size(); }
};

/// An ordered list of parameters.
template <class T>
struct ParamStore {
  std::vector<Param<T>> params;

  /// Appends a zero-initialised tensor and returns its index; a `frozen` one gets no gradient
  /// buffer at all (as freeze() leaves it).
  int add(std::string name, std::vector<int> shape, bool decay, bool frozen = false);
  /// Index of `name`, or -1.
  int find(const std::string& name) const noexcept;
  /// Sets every gradient to zero.
  void zero_grad() noexcept;
  /// Total number of elements.
  std::int64_t numel() const noexcept;
  /// Elements of the tensors that are not frozen.
  std::int64_t trainable_numel() const noexcept;
  /// Marks tensor i frozen and frees its gradient.
  void freeze(int i);
  /// Global L2 norm of all gradients (accumulated in double, fixed order).
  double grad_norm() const noexcept;
  /// Global-norm clipping: when grad_norm() > max_norm > 0, scales every gradient by
  /// max_norm / (norm + 1e-6) (as torch.nn.utils.clip_grad_norm_).  Returns the norm before
  /// clipping.
  double clip_grad_norm(double max_norm) noexcept;
};

extern template struct ParamStore<float>;
extern template struct ParamStore<double>;

}  // namespace icmlkit::nn
