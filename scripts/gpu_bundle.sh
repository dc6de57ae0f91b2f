#!/usr/bin/env bash
# Packs what `scripts/gpu_check.sh --bundle DIR` needs on a GPU machine that has the CUDA
# toolkit and driver but none of our Debian libraries and no package registry (the device
# machine of this workplace: an image with nvcc, cuBLAS and Python, nothing else of ours):
#   DIR/bin   unit_tests, bench-gpu-engine, bench-decode-host, fafo-generate, lm-generate, lm-eval from a
#             CUDA-enabled build (stripped), and jq
#   DIR/lib   every shared library they load except glibc's own and CUDA's (libcudart and
#             cuBLAS come from the GPU machine's toolkit: cuBLASLt alone is ~500 MB)
#   DIR/MANIFEST  the build's commit, CUDA architectures and the library list
# OUT ending in .tar.xz packs the folder into that one file (about 16 MB instead of 57: what
# travels to the device machine is limited to 64 MB with the working tree).
# Build here (a machine with nvcc and the Debian packages), carry the file there:
#   make -f Makefile.shortcuts gpu-bundle      # = this script on build/ into .gpu-bundle.tar.xz
#   (device) bash scripts/gpu_check.sh --bundle .gpu-bundle.tar.xz     carry: .gpu-bundle.tar.xz
# Usage: scripts/gpu_bundle.sh BUILD_DIR OUT            (OUT: a folder, or a file *.tar.xz)
set -euo pipefail
build=${1:?usage: gpu_bundle.sh BUILD_DIR OUT}
dest=${2:?usage: gpu_bundle.sh BUILD_DIR OUT}
out=$dest
[[ $dest == *.tar.xz ]] && out=${dest%.tar.xz}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=$build/CMakeCache.txt
[ -f "$cache" ] || { echo "gpu_bundle.sh: $build is not a configured build directory" >&2; exit 2; }
"$build/bin/lm-generate" --version 2>/dev/null | grep -q '^cuda: on' ||
  { echo "gpu_bundle.sh: $build was built without CUDA (configure with -DICMLKIT_CUDA=ON and nvcc on PATH)" >&2; exit 2; }
progs=("$build/test/unit/unit_tests" "$build/bin/bench-gpu-engine" "$build/bin/bench-decode-host" "$build/bin/fafo-generate" "$build/bin/lm-generate" "$build/bin/lm-eval")
for p in "${progs[@]}"; do [ -x "$p" ] || { echo "gpu_bundle.sh: $p not built" >&2; exit 2; }; done
jq_bin=$(command -v jq) || { echo "gpu_bundle.sh: jq not found (it travels in the bundle: gpu_check.sh needs it)" >&2; exit 2; }

rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin" "$out.tmp/lib"
for p in "${progs[@]}" "$jq_bin"; do
  cp "$p" "$out.tmp/bin/"
  strip --strip-unneeded "$out.tmp/bin/$(basename "$p")" 2>/dev/null || true
done
# Libraries: the union of what ldd resolves for each program, minus the C library's own
# (present everywhere, and must match the machine's loader) and CUDA's.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so)'
for p in "${progs[@]}" "$jq_bin"; do
  ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$out.tmp/lib/$name"
done
{
  echo "commit $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  "$build/bin/lm-generate" --version | sed -n 's/^cuda: /cuda /p'
  echo "nvcc $(nvcc --version 2>/dev/null | tail -1)"
  echo "libraries $(ls "$out.tmp/lib" | tr '\n' ' ')"
} > "$out.tmp/MANIFEST"
rm -rf "$out"
mv "$out.tmp" "$out"
if [ "$out" != "$dest" ]; then
  tar -cJf "$dest.tmp" -C "$(dirname "$out")" "$(basename "$out")" && mv "$dest.tmp" "$dest"
  rm -rf "$out"
fi
echo "gpu_bundle.sh: $(du -sh "$dest" | cut -f1) in $dest; carry it and run: bash scripts/gpu_check.sh --bundle $dest" >&2
