# Tokenizer throughput (JSON lines); see docs/tokenizer.md.
add_executable(bench_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_bench.cc)
target_link_libraries(bench_tokenizer PRIVATE rote_inference rote_warnings)
target_compile_definitions(bench_tokenizer PRIVATE ROTE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
