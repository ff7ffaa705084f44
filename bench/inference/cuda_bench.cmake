# CUDA backend benchmark (run on the GPU machine; see docs/performance.md, "CUDA inference").
# Included by bench/inference/CMakeLists.txt.
if(ROTE_HAVE_CUDA)
  add_executable(cuda_bench ${CMAKE_CURRENT_SOURCE_DIR}/cuda_bench.cc ${CMAKE_CURRENT_SOURCE_DIR}/cuda_ceilings.cu)
  set_property(TARGET cuda_bench PROPERTY CUDA_STANDARD 17)
  target_link_libraries(cuda_bench PRIVATE rote_inference rote_inference_cuda rote_warnings)
  # The bench prints the revision it was built from (cmake/source_revision.cmake), checked at
  # every build so a stale or modified binary does not pass for HEAD.
  add_custom_target(cuda_bench_source_revision
                    COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR}
                            -DOUT=${CMAKE_CURRENT_BINARY_DIR}/generated/rote_source_revision.h
                            -P ${PROJECT_SOURCE_DIR}/cmake/source_revision.cmake
                    BYPRODUCTS ${CMAKE_CURRENT_BINARY_DIR}/generated/rote_source_revision.h
                    COMMENT "Source revision for cuda_bench")
  add_dependencies(cuda_bench cuda_bench_source_revision)
  target_include_directories(cuda_bench PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated)
  # Whether wgmma gives mma.sync's bits (docs/fast_profile.md, "Next"); JSON lines.
  add_executable(wgmma_bits_probe ${CMAKE_CURRENT_SOURCE_DIR}/wgmma_bits_probe.cu)
endif()
