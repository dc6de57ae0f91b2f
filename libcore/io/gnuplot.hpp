// PNG pictures through gnuplot (the toolkit's one plotting dependency): the data and the script go
// to temporary files beside the output, gnuplot renders, and the PNG is committed atomically.
#pragma once

#include <functional>
#include <string>

namespace icmlkit::io {

/// `text` as a gnuplot single-quoted string (quotes doubled).
std::string gnuplot_quote(const std::string& text);

/// Throws RuntimeError naming `flag` when `gnuplot_exe` is not on the PATH (checked before any
/// work, so that a missing gnuplot costs nothing).
void require_gnuplot(const std::string& flag, const std::string& gnuplot_exe = "gnuplot");

/// Renders `png` (written atomically; nothing is left on failure): `data` goes to a temporary
/// file, and the script is "set terminal pngcairo size width,height noenhanced", "set output ..."
/// followed by `commands(quoted data path)`.  Throws RuntimeError when gnuplot is missing, fails
/// (with its first message line) or writes nothing, and when the temporary files cannot be written.
void gnuplot_png(const std::string& png, const std::string& data, const std::function<std::string(const std::string&)>& commands,
                 int width, int height, const std::string& gnuplot_exe = "gnuplot");

class AtomicFile;
/// The same into `out`'s temporary file, left uncommitted: a tool writing several outputs
/// commits them together once all are written.
void gnuplot_png(AtomicFile& out, const std::string& data, const std::function<std::string(const std::string&)>& commands,
                 int width, int height, const std::string& gnuplot_exe = "gnuplot");

}  // namespace icmlkit::io
