#include "nn/params.hpp"

#include <algorithm>
#include <cmath>

namespace icmlkit::nn {

template <class T>
int ParamStore<T>::add(std::string name, std::vector<int> shape, bool decay, bool frozen) {
  std::size_t n = 1;
  for (int s : shape) n *= std::size_t(s);
  Param<T> p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.value.assign(n, T(0));
  if (!frozen) p.grad.assign(n, T(0));
  p.decay = decay;
  p.frozen = frozen;
  params.push_back(std::move(p));
  return static_cast<int>(params.size()) - 1;
}

template <class T>
int ParamStore<T>::find(const std::string& name) const noexcept {
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return static_cast<int>(i);
  return -1;
}

template <class T>
void ParamStore<T>::zero_grad() noexcept {
  for (auto& p : params) std::fill(p.grad.begin(), p.grad.end(), T(0));
}

template <class T>
std::int64_t ParamStore<T>::numel() const noexcept {
  std::int64_t n = 0;
  for (const auto& p : params) n += static_cast<std::int64_t>(p.numel());
  return n;
}

template <class T>
std::int64_t ParamStore<T>::trainable_numel() const noexcept {
  std::int64_t n = 0;
  for (const auto& p : params)
    if (!p.frozen) n += static_cast<std::int64_t>(p.numel());
  return n;
}

template <class T>
void ParamStore<T>::freeze(int i) {
  params[i].frozen = true;
  params[i].grad = std::vector<T>();
}

template <class T>
double ParamStore<T>::grad_norm() const noexcept {
  double ss = 0.0;
  for (const auto& p : params)
    for (T g : p.grad) ss += double(g) * g;
  return std::sqrt(ss);
}

template <class T>
double ParamStore<T>::clip_grad_norm(double max_norm) noexcept {
  const double norm = grad_norm();
  if (max_norm > 0 && norm > max_norm && std::isfinite(norm)) {
    const T s = static_cast<T>(max_norm / (norm + 1e-6));
    for (auto& p : params)
      for (T& g : p.grad) g *= s;
  }
  return norm;
}

template struct ParamStore<float>;
template struct ParamStore<double>;

}  // namespace icmlkit::nn
