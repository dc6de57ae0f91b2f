// The toolkit's one job-array convention (issue 42): `--array-task i/N` makes a program do task i
// of N (0-based, as Slurm's SLURM_ARRAY_TASK_ID with --array=0-(N-1)), writing a part that a merge
// step joins.  plora-plan, plora-train, infolaw-fit --bootstrap and bimetric-index --shards use it;
// scripts/slurm/ holds the sbatch templates.
#pragma once

#include <string>
#include <utility>

namespace icmlkit::cli {

/// Parses "i/N" (0 <= i < N) into {i, N}.  Throws UsageError naming --array-task otherwise.
std::pair<int, int> parse_array_task(const std::string& text);

}  // namespace icmlkit::cli
