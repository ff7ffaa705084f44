# CUDA backend benchmark (run on the GPU machine; see docs/performance.md, "CUDA inference").
# Included by bench/inference/CMakeLists.txt.
if(ROTE_HAVE_CUDA)
  add_executable(cuda_bench ${CMAKE_CURRENT_SOURCE_DIR}/cuda_bench.cc ${CMAKE_CURRENT_SOURCE_DIR}/cuda_ceilings.cu)
  set_property(TARGET cuda_bench PROPERTY CUDA_STANDARD 17)
  target_link_libraries(cuda_bench PRIVATE rote_inference rote_inference_cuda rote_warnings)
endif()
