# Generation throughput on one GPU against every GPU of the host (EngineGroup), with the tokens
# compared between them and against the CPU (JSON lines).
add_executable(bench_engine_group ${CMAKE_CURRENT_SOURCE_DIR}/engine_group_bench.cc)
target_link_libraries(bench_engine_group PRIVATE rote_inference rote_warnings)
