// Distances for nearest-neighbour search behind one interface, each with a call counter
// (Xu, Silwal & Indyk, "A Bi-metric Framework for Fast Similarity Search": the proxy d and
// the ground truth D are two such spaces over the same n items).
//
// Semantics of the reported distance (what users see, what D/d ratios use):
//   l2      Euclidean distance |x - y|_2 (>= 0)
//   ip      negative inner product -<x, y> (may be negative; smaller = more similar)
//   cosine  1 - cos(x, y), in [0, 2]; vectors are normalised once when the space is built
//           and a zero vector is rejected with InputError (cosine is undefined there).
// Internally l2 works on the squared distance (same order, no sqrt in hot loops); every
// graph/tree rule that compares distances says which one it uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

namespace icmlkit::ann {

/// The supported metrics.
enum class Metric { l2, ip, cosine };

/// Parses "l2", "ip" or "cosine"; throws UsageError naming `flag` otherwise.
Metric parse_metric(const std::string& name, const std::string& flag);
/// "l2", "ip" or "cosine".
std::string metric_name(Metric m);

/// Asks the kernel to back [p, p + bytes) with transparent huge pages (Linux madvise
/// MADV_HUGEPAGE on the whole 2 MiB pages inside); a no-op elsewhere or when refused.
void huge_page_advice(void* p, std::size_t bytes) noexcept;

/// A std::allocator whose storage starts on a 64-byte cache line (malloc gives 16 bytes), so
/// a row whose size is a multiple of 64 bytes (dim a multiple of 16) spans whole lines: a
/// 64-float row is 4 lines, not 5.  Blocks of 4 MiB or more are aligned to 2 MiB and offered
/// to the kernel's transparent huge pages (madvise; see huge_page_advice): graph searches
/// touch rows all over such a buffer, and with 4 KiB pages nearly every row costs a TLB
/// miss.  Throws std::bad_alloc as operator new.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() noexcept = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    void* p = ::operator new(bytes, alignment(bytes));
    if (bytes >= kHugeFrom) huge_page_advice(p, bytes);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept { ::operator delete(p, alignment(n * sizeof(T))); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }

 private:
  static constexpr std::size_t kHugeFrom = std::size_t{4} << 20;
  static std::align_val_t alignment(std::size_t bytes) noexcept {
    return std::align_val_t{bytes >= kHugeFrom ? std::size_t{2} << 20 : std::size_t{64}};
  }
};

/// Float storage of vector sets: cache-line aligned (see CacheLineAllocator).
using FloatBuffer = std::vector<float, CacheLineAllocator<float>>;

/// Row-major float32 vectors [n, dim] in one contiguous buffer.
struct Vectors {
  std::size_t n = 0, dim = 0;
  FloatBuffer data;  ///< n * dim values, cache-line aligned
  /// Pointer to row i.
  const float* row(std::size_t i) const noexcept { return data.data() + i * dim; }
  float* row(std::size_t i) noexcept { return data.data() + i * dim; }
};

/// The largest |coordinate| a Space accepts under l2 and ip for dim-long vectors:
/// sqrt(FLT_MAX / (16 dim)), so no squared L2 distance or inner product overflows float32
/// (about 1.1e18 at dim 64).  Cosine vectors are normalised and have no such limit.
double max_abs_value(std::size_t dim) noexcept;

/// Internal ("raw") distance between two dim-long vectors: squared L2, -<x,y>, or 1 - <x,y>
/// (cosine on vectors already normalised).  Hot loop: no allocation, auto-vectorised.
float raw_distance(Metric m, const float* a, const float* b, std::size_t dim) noexcept;
/// Raw distances from `q` (dim floats) to rows ids[0..count) of the row-major matrix `base`
/// (dim columns): out[t] = raw_distance(m, q, base + ids[t] * dim, dim).  The batch form of
/// the hot loop: one dispatch per call, and every row is prefetched before the first is
/// read (graph search gathers a node's unvisited neighbours and evaluates them at once).
void raw_distances(Metric m, const float* q, const float* base, std::size_t dim, const std::uint32_t* ids, std::size_t count,
                   float* out) noexcept;
/// Converts a raw distance to the reported one (sqrt for l2, identity otherwise; l2 values
/// below 0 from rounding are clamped to 0).
double report_distance(Metric m, float raw) noexcept;

/// A metric space over n items: the item vectors (normalised for cosine) and the metric.
class Space {
 public:
  Space() = default;
  /// Takes the vectors.  Throws InputError naming `label` and the row when a value is not
  /// finite, under l2 or ip exceeds max_abs_value(dim), or, under cosine, a vector is zero.
  Space(Vectors v, Metric m, const std::string& label);
  /// Number of items.
  std::size_t size() const noexcept { return v_.n; }
  /// Coordinates per item.
  std::size_t dim() const noexcept { return v_.dim; }
  /// The metric.
  Metric metric() const noexcept { return m_; }
  /// Item vectors (normalised under cosine).
  const Vectors& vectors() const noexcept { return v_; }
  /// Raw distance between items i and j (not counted: used only for building and tests).
  float item_distance(std::size_t i, std::size_t j) const noexcept {
    return raw_distance(m_, v_.row(i), v_.row(j), v_.dim);
  }
  /// Prepares a query vector for this space (normalises under cosine).  Throws InputError
  /// naming `where` for a non-finite value, a wrong length or a zero vector under cosine.
  std::vector<float> prepare_query(const float* q, std::size_t dim, const std::string& where) const;

 private:
  Vectors v_;
  Metric m_ = Metric::l2;
};

/// Distances from one query to items of a Space, counting every evaluation (the quantity
/// the bi-metric framework budgets).  One per query and thread; not shared.
class QueryDistance {
 public:
  /// `q` must outlive this object and come from space.prepare_query.
  QueryDistance(const Space& space, const float* q) : s_(&space), q_(q) {}
  /// Raw distance to item i; increments calls().
  float operator()(std::size_t i) noexcept {
    ++calls_;
    return raw_distance(s_->metric(), q_, s_->vectors().row(i), s_->dim());
  }
  /// Raw distances to items ids[0..count) into out[0..count); adds `count` to calls().
  void batch(const std::uint32_t* ids, std::size_t count, float* out) noexcept {
    calls_ += count;
    raw_distances(s_->metric(), q_, s_->vectors().data.data(), s_->dim(), ids, count, out);
  }
  /// Number of evaluations so far.
  std::uint64_t calls() const noexcept { return calls_; }
  /// The space.
  const Space& space() const noexcept { return *s_; }

 private:
  const Space* s_;
  const float* q_;
  std::uint64_t calls_ = 0;
};

}  // namespace icmlkit::ann
