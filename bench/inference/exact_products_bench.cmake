# The exact profile's batched products alone, per kernel variant (run on the GPU machine; see
# docs/performance.md, "Exact prefill products"). Included by bench/inference/CMakeLists.txt.
if(ROTE_HAVE_CUDA)
  add_executable(exact_products_bench ${CMAKE_CURRENT_SOURCE_DIR}/exact_products_bench.cc
                                      ${CMAKE_CURRENT_SOURCE_DIR}/cuda_ceilings.cu)
  set_property(TARGET exact_products_bench PROPERTY CUDA_STANDARD 17)
  target_link_libraries(exact_products_bench PRIVATE rote_inference rote_inference_cuda rote_warnings)
endif()
