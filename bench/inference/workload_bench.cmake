# The generation workload: N points x 3 attempts with the pipeline's prompts (JSON lines).
add_executable(bench_workload ${CMAKE_CURRENT_SOURCE_DIR}/workload_bench.cc)
target_link_libraries(bench_workload PRIVATE rote_inference rote_warnings)
target_compile_definitions(bench_workload PRIVATE ROTE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
