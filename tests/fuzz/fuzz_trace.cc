// Fuzz target: a communication trace file (een-bench replay TRACE, the
// format in samples/traces/README.md): a trace or an error naming the line.
#include "bench/trace.h"
#include "fuzz/scratch_path.h"

using namespace een;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ScratchPath file("input.trace");
  fuzz::WriteInput(file.path(), data, size);
  auto trace = bench::ReadTrace(file.string());
  if (trace.ok()) {
    (void)trace->TotalNumel();
    (void)trace->Parameters();
  }
  return 0;
}
