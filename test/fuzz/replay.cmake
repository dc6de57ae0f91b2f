# The replay of the kept fuzz corpora in the normal test suite (included by test/CMakeLists.txt):
# one program, fuzz-replay, holds every harness of this folder with its libFuzzer entry points
# renamed, and one ctest case per harness replays test/fuzz/corpus/<target>.tar.xz (the corpus
# of the longest campaign, minimized by test/fuzz/pack-corpus.sh) and the regression inputs
# test/fuzz/regressions/<target without fuzz_>-*.
set(ICMLKIT_REPLAY_TARGETS fuzz_gguf fuzz_safetensors fuzz_checkpoint fuzz_hf_config fuzz_table fuzz_ts fuzz_vectors fuzz_rank fuzz_openai)
set(ICMLKIT_FUZZ_SRC ${PROJECT_SOURCE_DIR}/test/fuzz)
add_executable(fuzz-replay ${ICMLKIT_FUZZ_SRC}/replay_main.cpp)
foreach(target ${ICMLKIT_REPLAY_TARGETS})
  add_library(${target}_replay OBJECT ${ICMLKIT_FUZZ_SRC}/${target}.cpp)
  target_link_libraries(${target}_replay PRIVATE icmlkit::core)
  target_compile_definitions(${target}_replay PRIVATE LLVMFuzzerTestOneInput=replay_${target}
                             LLVMFuzzerInitialize=replay_init_${target})
  target_sources(fuzz-replay PRIVATE $<TARGET_OBJECTS:${target}_replay>)
  add_test(NAME fuzz/replay-${target}
           COMMAND bash ${ICMLKIT_FUZZ_SRC}/replay.sh $<TARGET_FILE:fuzz-replay> ${target} ${CMAKE_COMMAND})
  # (fuzz-replay's own limit is 10 s an input, 30 s in a sanitizer build; this one bounds the case)
  set_tests_properties(fuzz/replay-${target} PROPERTIES LABELS fuzz TIMEOUT 300)
endforeach()
target_link_libraries(fuzz-replay PRIVATE icmlkit::core)
set_target_properties(fuzz-replay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/test-bin)
