# Grammar-constrained decoding: compile time, memory and mask time per token (JSON lines).
add_executable(bench_grammar ${CMAKE_CURRENT_SOURCE_DIR}/grammar_bench.cc)
target_link_libraries(bench_grammar PRIVATE rote_inference rote_warnings)
target_compile_definitions(bench_grammar PRIVATE ROTE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# Decode tokens/s with and without the Lua reply grammar, side by side (JSON lines).
add_executable(bench_grammar_decode ${CMAKE_CURRENT_SOURCE_DIR}/grammar_decode_bench.cc)
target_link_libraries(bench_grammar_decode PRIVATE rote_inference rote_warnings)
target_compile_definitions(bench_grammar_decode PRIVATE ROTE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The model half of the constrained-generation benchmark (prompts in, replies out).
add_executable(bench_grammar_specs ${CMAKE_CURRENT_SOURCE_DIR}/grammar_specs_run.cc)
target_link_libraries(bench_grammar_specs PRIVATE rote_inference rote_warnings)
target_compile_definitions(bench_grammar_specs PRIVATE ROTE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The lua_chunk grammar against luac over a corpus of Lua files.
add_executable(bench_lua_corpus ${CMAKE_CURRENT_SOURCE_DIR}/lua_corpus_check.cc)
target_link_libraries(bench_lua_corpus PRIVATE rote_inference rote_warnings)
