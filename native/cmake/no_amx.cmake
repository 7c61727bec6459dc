# no_amx.cmake -- keeps ggml's AMX kernels out of every build of the pinned llama.cpp tree.
#
# Why: on CPUs with AMX (Intel Sapphire Rapids and later) -march=native (GGML_NATIVE, the
# default) compiles ggml's AMX matrix-multiply path in, and in this pinned tree it segfaults
# in ggml_backend_amx_mul_mat on the first evaluation of every quantized catalogue model
# (seen here on 2026-11-30; upstream llama.cpp issue 20824, closed as stale without a fix).
# Without it the same CPUs run ggml's AVX-512 kernels.
#
# Used two ways, the same way: native/CMakeLists.txt includes it, and the Makefile passes it
# as CMAKE_PROJECT_INCLUDE to the trees it configures from vendor/ directly (llama-server and
# llama-bench for the benchmarks, rpc-server), so that every build of the tree this project
# makes runs the same kernels.
include_guard(GLOBAL)
include(CheckCXXCompilerFlag)

function(el_disable_amx)
  if(NOT TARGET ggml-cpu)
    return()
  endif()
  check_cxx_compiler_flag(-mno-amx-int8 EL_CXX_HAS_MNO_AMX)
  if(EL_CXX_HAS_MNO_AMX)
    # Appended after ggml's own -march=native, so these win.
    target_compile_options(ggml-cpu PRIVATE -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
  endif()
endfunction()

# Either way this file is read before ggml-cpu exists (inside the tree's first project()
# call, or from native/ before it adds the tree): run the function once the top-level
# directory has been processed.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL el_disable_amx)
