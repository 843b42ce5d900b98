// een-export: a job's snapshot folder as a checkpoint torch.load reads
// (worker/checkpoint_export.h), what DataParallel's state_dict() gives.
// `eenctl export` runs it (a program of its own, so that eenctl does not
// load LibTorch).
//
//   een-export --snapshot-dir DIR --out FILE [--step N] [--wait SECONDS]
// --wait: a step not yet whole on every PS (a running job writing it) is
// waited for, up to SECONDS.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "common/version.h"
#include "worker/checkpoint_export.h"

int main(int argc, char** argv) {
  CLI::App app{
      "een-export: a job's snapshots as a checkpoint plain PyTorch loads: {\"model\": "
      "state_dict, \"optimizer\": torch.optim state_dict}"};
  app.set_version_flag("--version", een::kVersionLine);
  std::string dir, out;
  std::optional<int64_t> step;
  app.add_option("--snapshot-dir", dir, "the job's --snapshot-dir (its ps-N/ stores)")->required();
  app.add_option("--out", out, "the checkpoint file to write (torch.save's format)")->required();
  app.add_option("--step", step, "the snapshot's step (default: the newest whole one)")
      ->check([](const std::string& text) {
        return text.find_first_not_of("0123456789") == std::string::npos && !text.empty()
                   ? std::string()
                   : "--step " + text + " is not a step number (0, 1, 2, ...)";
      });
  int wait = 0;
  app.add_option("--wait", wait, "seconds to wait for the step to be whole on every PS")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const auto fail = [](const std::string& why) {
    std::fprintf(stderr, "een-export: %s\n", why.c_str());
    return 1;
  };
  const auto wanted = step ? std::optional<uint64_t>(static_cast<uint64_t>(*step)) : std::nullopt;
  een::Result<een::ExportedCheckpoint> exported = een::ExportCheckpoint(dir, wanted);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait);
  bool said = false;
  // Not whole yet: a running job is still writing it.
  while (!exported.ok() && exported.status().code() == een::StatusCode::kNotFound &&
         std::chrono::steady_clock::now() < deadline) {
    if (!said) {
      std::fprintf(stderr, "een-export: waiting up to %d s for every PS to write it (%s)\n", wait,
                   exported.status().message().c_str());
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    exported = een::ExportCheckpoint(dir, wanted);
  }
  if (!exported.ok()) {
    return fail(exported.status().message() +
                (said ? " (after waiting " + std::to_string(wait) +
                            " s: is the job still training? A PS on another host writes its "
                            "ps-N folder there: export on a host that sees every one)"
                      : ""));
  }
  // Where torch.save would write: through a link to its file. Never into
  // the snapshots it reads, never over a device or a folder.
  std::error_code ec;
  std::filesystem::path target = out;
  if (std::filesystem::is_symlink(target, ec)) {  // even to a file still to be made
    const std::filesystem::path to = std::filesystem::read_symlink(target, ec);
    target = to.is_absolute() ? to : std::filesystem::absolute(target).parent_path() / to;
  }
  if (std::filesystem::exists(target, ec)) {
    target = std::filesystem::canonical(target, ec);
    if (ec || !std::filesystem::is_regular_file(target, ec)) {
      return fail(out + " exists and is not a regular file: give --out a new file's path");
    }
  }
  std::filesystem::path folder = std::filesystem::weakly_canonical(dir, ec);
  if (folder.filename().empty()) folder = folder.parent_path();  // "DIR/"
  const std::filesystem::path written = std::filesystem::weakly_canonical(target, ec);
  const auto [end, at] =
      std::mismatch(folder.begin(), folder.end(), written.begin(), written.end());
  if (end == folder.end()) {
    return fail("--out " + out + " lies inside the snapshot folder " + dir +
                ", which export only reads: give it a path outside");
  }

  const std::vector<char>& bytes = exported->bytes;
  // Whole or not at all: a temporary file renamed over the target.
  const std::string temporary = target.string() + ".tmp-" + std::to_string(getpid());
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
  if (std::rename(temporary.c_str(), target.c_str()) != 0) {
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
