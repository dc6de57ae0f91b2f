// bench/gpu_engine.cu compiled as C++ against the CUDA emulator, for gpu_check.sh --emulated.
#include "../../bench/gpu_engine.cu"
