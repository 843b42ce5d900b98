#include "launcher/step_plot.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>

namespace een {

Status PlotSteps(const std::vector<StepTimes>& steps, const std::string& png_path) {
  if (steps.empty()) return FailedPrecondition("no whole step to plot (ask for more steps)");
  std::map<int, std::vector<const StepTimes*>> by_worker;
  for (const StepTimes& s : steps) by_worker[s.worker].push_back(&s);
  if (png_path.find('\'') != std::string::npos || png_path.find('\n') != std::string::npos) {
    return InvalidArgument("the picture's path may not hold a quote or a newline");
  }
  std::string script = fmt::format(
      "set terminal pngcairo size 1200,{} noenhanced\n"
      "set output '{}'\n"
      "set style data histograms\nset style histogram rowstacked\n"
      "set style fill solid 0.85 border -1\nset boxwidth 0.8\n"
      "set ylabel 'ms'\nset key outside right top\nset grid ytics\n"
      "set multiplot layout {},1 title 'EEN step breakdown per worker "
      "(compute, push, wait, pull)'\n",
      200 + 220 * by_worker.size(), png_path, by_worker.size());
  for (const auto& [worker, rows] : by_worker) {
    script += fmt::format("$w{} << EOD\n", worker);
    for (const StepTimes* s : rows) {
      script += fmt::format("{} {:.3f} {:.3f} {:.3f} {:.3f}\n", s->step, s->compute_ms, s->push_ms,
                            s->wait_ms, s->pull_ms);
    }
    script += "EOD\n";
    script += fmt::format(
        "set title 'worker {}'\nset xlabel 'step'\n"
        "plot $w{} using 2:xtic(1) title 'compute' lc rgb '#4c72b0', "
        "'' using 3 title 'push' lc rgb '#dd8452', '' using 4 title 'wait' lc rgb '#c44e52', "
        "'' using 5 title 'pull' lc rgb '#55a868'\n",
        worker, worker);
  }
  script += "unset multiplot\n";
  // Its own messages only: should it fail to open the picture, it would
  // write the PNG to stdout.
  FILE* gnuplot = popen("gnuplot 2>&1 >/dev/null", "w");
  if (!gnuplot)
    return FailedPrecondition("cannot run gnuplot: install it (apt-get install gnuplot-nox)");
  std::fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = pclose(gnuplot);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) == 127) {
    return FailedPrecondition("gnuplot is not installed: apt-get install gnuplot-nox");
  }
  if (WEXITSTATUS(status) != 0) {
    return Internal(
        fmt::format("gnuplot failed (exit {}) drawing {}", WEXITSTATUS(status), png_path));
  }
  return Status::Ok();
}

}  // namespace een
