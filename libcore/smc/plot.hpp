// Trajectory plots of SMC-optimisation runs: JSON Lines trajectories -> one PNG via gnuplot.
#pragma once

#include <string>
#include <vector>

namespace icmlkit::smc {

/// One line of the plot: a label and (step, value) pairs.
struct PlotSeries {
  std::string label;
  std::vector<double> step, value;
};

/// Reads a trajectory written by smc-optimize --trajectory (a {"meta": ...} line, then one
/// object per step).  The value plotted is "estimate" when every row has a finite one (reward
/// problems), else "theta" when it is a number, else the Euclidean norm of the "theta" array;
/// `ylabel` receives which.  The label is the meta line's "method" (or the file name).
/// Throws InputError on an unreadable file, a malformed line (with its line number) or no rows.
PlotSeries read_trajectory(const std::string& path, std::string& ylabel);

/// Draws all series as lines on one PNG at `png` (written atomically) by running gnuplot
/// (`gnuplot_exe`, found on PATH when a bare name).  Throws RuntimeError when gnuplot is
/// missing or fails.
void plot_series(const std::vector<PlotSeries>& series, const std::string& ylabel, const std::string& title,
                 const std::string& png, const std::string& gnuplot_exe = "gnuplot");

}  // namespace icmlkit::smc
