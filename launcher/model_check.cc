#include "launcher/model_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace een {
namespace {

// "shape [3, 4]", or "12 elements" when the shape is not known.
std::string SizeText(const TensorInfo& t) {
  if (t.shape.empty()) return fmt::format("{} elements", t.numel);
  return fmt::format("shape [{}]", fmt::join(t.shape, ", "));
}

}  // namespace

std::string DescribeModelMismatch(const std::map<std::string, std::vector<TensorInfo>>& models) {
  size_t longest = 0;
  for (const auto& [who, model] : models) longest = std::max(longest, model.size());
  for (size_t i = 0; i < longest; ++i) {
    // What each party has at tensor i, in the order first seen.
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;
    for (const auto& [who, model] : models) {
      const std::string what = i < model.size()
                                   ? fmt::format("{} '{}' of {}", TensorKindName(model[i].kind),
                                                 model[i].name, SizeText(model[i]))
                                   : fmt::format("no tensor {} ({} in all)", i, model.size());
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& x) { return x.first == what; });
      if (g == groups.end()) {
        groups.push_back({what, {who}});
      } else {
        g->second.push_back(who);
      }
    }
    if (groups.size() < 2) continue;
    std::string text = fmt::format("model mismatch at tensor {}: ", i);
    for (size_t k = 0; k < groups.size(); ++k) {
      const auto& [what, who] = groups[k];
      std::string names = who.back();
      if (who.size() > 1) {
        names = fmt::format("{} and {}",
                            fmt::join(std::vector<std::string>(who.begin(), who.end() - 1), ", "),
                            who.back());
      }
      text +=
          fmt::format("{}{} {} {}", k ? "; " : "", names, who.size() > 1 ? "have" : "has", what);
    }
    return text;
  }
  return "";
}

}  // namespace een
