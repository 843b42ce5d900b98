// een-export: a job's snapshot folder as a checkpoint torch.load reads
// (worker/checkpoint_export.h), what DataParallel's state_dict() gives.
// `eenctl export` runs it (a program of its own, so that eenctl does not
// load LibTorch).
//
//   een-export --snapshot-dir DIR --out FILE [--step N]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "common/version.h"
#include "worker/checkpoint_export.h"

int main(int argc, char** argv) {
  CLI::App app{
      "een-export: a job's snapshots as a checkpoint plain PyTorch loads: {\"model\": "
      "state_dict, \"optimizer\": torch.optim state_dict}"};
  app.set_version_flag("--version", een::kVersionLine);
  std::string dir, out;
  std::optional<uint64_t> step;
  app.add_option("--snapshot-dir", dir, "the job's --snapshot-dir (its ps-N/ stores)")->required();
  app.add_option("--out", out, "the checkpoint file to write (torch.save's format)")->required();
  app.add_option("--step", step, "the snapshot's step (default: the newest whole one)");
  CLI11_PARSE(app, argc, argv);

  een::Result<een::ExportedCheckpoint> exported = een::ExportCheckpoint(dir, step);
  if (!exported.ok()) {
    std::fprintf(stderr, "een-export: %s\n", exported.status().message().c_str());
    return 1;
  }
  const std::vector<char> bytes = torch::jit::pickle_save(exported->value);
  // Whole or not at all: a temporary file renamed over `out`.
  const std::string temporary = out + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    file.flush();
    if (!file) {
      const int err = errno;
      std::filesystem::remove(temporary);
      std::fprintf(stderr, "een-export: cannot write %s (as %s first): %s\n", out.c_str(),
                   temporary.c_str(), std::strerror(err));
      return 1;
    }
  }
  if (std::rename(temporary.c_str(), out.c_str()) != 0) {
    const int err = errno;
    std::filesystem::remove(temporary);
    std::fprintf(stderr, "een-export: cannot write %s: %s\n", out.c_str(), std::strerror(err));
    return 1;
  }
  std::printf("step %llu of %s: %zu tensors and the optimizer state written to %s (%zu bytes)\n",
              static_cast<unsigned long long>(exported->step), dir.c_str(), exported->tensors,
              out.c_str(), bytes.size());
  return 0;
}
