#include "dist/world.hpp"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#if ICMLKIT_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings library to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::dist {

bool built_with_mpi() noexcept {
#if ICMLKIT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int launcher_size() noexcept {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
    const char* s = std::getenv(v);
    if (s && *s) {
      const long n = std::strtol(s, nullptr, 10);
      if (n > 0 && n < INT_MAX) return static_cast<int>(n);
    }
  }
  return std::getenv("PMIX_RANK") || std::getenv("PMI_RANK") ? 1 : 0;
}

#if ICMLKIT_HAVE_MPI
namespace {

/// MPI_COMM_WORLD.  Messages are cut to what an int count holds.
class MpiComm final : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  void send(const void* data, std::size_t bytes, int to) override {
    const auto* p = static_cast<const char*>(data);
    do {
      const int k = static_cast<int>(std::min<std::size_t>(bytes, kMax));
      MPI_Send(p, k, MPI_BYTE, to, kTag, MPI_COMM_WORLD);
      p += k;
      bytes -= std::size_t(k);
    } while (bytes > 0);
  }
  void send_async(const void* data, std::size_t bytes, int to) override {
    const auto* p = static_cast<const char*>(data);
    do {
      const int k = static_cast<int>(std::min<std::size_t>(bytes, kMax));
      pending_.emplace_back();
      MPI_Isend(p, k, MPI_BYTE, to, kTag, MPI_COMM_WORLD, &pending_.back());
      p += k;
      bytes -= std::size_t(k);
    } while (bytes > 0);
  }
  void wait_sends() override {
    if (!pending_.empty()) MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    pending_.clear();
  }
  void recv(void* data, std::size_t bytes, int from) override {
    auto* p = static_cast<char*>(data);
    do {
      const int k = static_cast<int>(std::min<std::size_t>(bytes, kMax));
      MPI_Status status;
      MPI_Recv(p, k, MPI_BYTE, from, kTag, MPI_COMM_WORLD, &status);
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      if (got != k)  // a longer message fails inside MPI_Recv (MPI_ERR_TRUNCATE aborts the job)
        throw RuntimeError(fmt::format("rank {} expected {} bytes from rank {}, got {}", rank_, k, from, got));
      p += k;
      bytes -= std::size_t(k);
    } while (bytes > 0);
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    do {
      const int k = static_cast<int>(std::min<std::size_t>(bytes, kMax));
      MPI_Bcast(p, k, MPI_BYTE, root, MPI_COMM_WORLD);
      p += k;
      bytes -= std::size_t(k);
    } while (bytes > 0);
  }
  std::string transport() const override { return "mpi"; }

 private:
  static constexpr std::size_t kMax = std::size_t(1) << 30;
  static constexpr int kTag = 41;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;  // send_async's, until wait_sends
};

}  // namespace
#endif

World::World() : comm_(std::make_unique<SelfComm>()) {}

World& World::get() {
  static World world;
  return world;
}

World& World::init(int& argc, char**& argv) {
  World& w = get();
  const int launched = launcher_size();
#if ICMLKIT_HAVE_MPI
  if (launched > 0 && !w.mpi_) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    w.mpi_ = true;
    w.comm_ = std::make_unique<MpiComm>();
    MPI_Comm local;  // the ranks that share this machine's memory
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &w.local_size_);
    MPI_Comm_free(&local);
  }
#else
  (void)argc;
  (void)argv;
  if (launched > 1)
    throw UsageError(fmt::format("started as one of {} ranks, but this build has no MPI: each rank would train alone "
                                 "(install libopenmpi-dev and rebuild, or run without mpirun)",
                                 launched));
#endif
  return w;
}

int World::default_threads() const noexcept {
  cpu_set_t set;
  int allowed = hardware_threads();
  if (sched_getaffinity(0, sizeof(set), &set) == 0) allowed = std::max(1, CPU_COUNT(&set));
  if (allowed >= hardware_threads()) allowed = hardware_threads() / std::max(1, local_size_);  // not bound: share
  return std::max(1, allowed);
}

int World::finish(int rc) noexcept {
#if ICMLKIT_HAVE_MPI
  if (mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (rc != 0 && size() > 1) MPI_Abort(MPI_COMM_WORLD, rc);
      MPI_Finalize();
    }
  }
#endif
  return rc;
}

}  // namespace icmlkit::dist
