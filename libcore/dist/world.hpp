// The process's place in a data-parallel job (issue 41): started alone, or as one of N ranks by an
// MPI launcher (mpirun / mpiexec of OpenMPI or MPICH, Slurm's srun with PMI).  MPI is optional at
// build time; a build without it runs alone and refuses a launch of several ranks.
#pragma once

#include <memory>
#include <string>

#include "dist/comm.hpp"

namespace icmlkit::dist {

/// Whether this build has MPI (CMake found it: ICMLKIT_HAVE_MPI).
bool built_with_mpi() noexcept;

/// The ranks an MPI launcher says this process is part of (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
/// PMIX_SIZE from the environment), or 0 when no launcher started it.
int launcher_size() noexcept;

/// This process's job.  One per process: the first init() call makes it.
class World {
 public:
  /// Joins the launcher's job: MPI_Init_thread (funneled: only the calling thread talks to MPI)
  /// when launcher_size() > 0 and the build has MPI; otherwise a world of one.  Throws UsageError
  /// when a launcher started several ranks of a build without MPI (each would train alone).
  static World& init(int& argc, char**& argv);
  /// The world made by init() (a world of one before it).
  static World& get();

  int rank() const noexcept { return comm_->rank(); }
  int size() const noexcept { return comm_->size(); }
  bool distributed() const noexcept { return comm_->size() > 1; }
  Comm& comm() noexcept { return *comm_; }
  /// Ranks of this job on this machine (1 without a launcher).
  int local_size() const noexcept { return local_size_; }
  /// Worker threads for a rank when --threads is not given: the CPUs its affinity mask allows;
  /// when the launcher did not bind it (its mask holds every CPU), those CPUs shared among the
  /// machine's ranks (at least 1).
  int default_threads() const noexcept;
  /// Ends the process's part in the job and returns the exit code to use: MPI_Finalize when `rc`
  /// is 0 (or the world is one rank); otherwise MPI_Abort(rc), which ends every rank (a rank that
  /// failed alone would leave the others waiting for its data).
  int finish(int rc) noexcept;
 private:
  World();
  std::unique_ptr<Comm> comm_;
  int local_size_ = 1;
  bool mpi_ = false;
};

}  // namespace icmlkit::dist
