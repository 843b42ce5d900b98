// EEN_VECTOR_CLONES: marks a hot loop function to be built twice, for the
// baseline x86-64 (SSE2) and for AVX2, the loader picking the AVX2 one on a
// CPU that has it (GCC target_clones). Only AVX2 is enabled, not FMA, so no
// multiply-add is contracted and both builds give bitwise the same results
// (tests/apply_test.cc, tests/wire_dtype_test.cc). Elsewhere, and under
// ThreadSanitizer (the loader runs the clones' resolver before TSan's
// runtime is up, and it crashes): no clones.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define EEN_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define EEN_VECTOR_CLONES
#endif
