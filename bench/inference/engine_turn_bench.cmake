# The engine's own time per step, without a model (JSON lines); see docs/performance.md.
add_executable(bench_engine_turn ${CMAKE_CURRENT_SOURCE_DIR}/engine_turn_bench.cc)
target_link_libraries(bench_engine_turn PRIVATE rote_inference rote_warnings)
# SHA-256 throughput, the SHA extensions against the portable code (JSON lines).
add_executable(bench_sha256 ${CMAKE_CURRENT_SOURCE_DIR}/sha256_bench.cc)
target_link_libraries(bench_sha256 PRIVATE rote_inference rote_warnings)
