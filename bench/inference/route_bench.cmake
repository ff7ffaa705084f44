# The mixture-of-experts route on the host (JSON lines); see docs/performance.md.
add_executable(bench_route ${CMAKE_CURRENT_SOURCE_DIR}/route_bench.cc)
target_link_libraries(bench_route PRIVATE rote_inference rote_warnings)
