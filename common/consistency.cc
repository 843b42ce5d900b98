#include "common/consistency.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace een {

Result<Consistency> Consistency::Parse(const std::string& text) {
  Consistency c;
  if (text == "bsp") return c;
  if (text == "async") {
    c.kind = Kind::kAsync;
    return c;
  }
  if (text.rfind("ssp:", 0) == 0 && text.size() > 4 && text.size() <= 10 && text[4] != '0' &&
      text.find_first_not_of("0123456789", 4) == std::string::npos) {
    c.kind = Kind::kSsp;
    c.staleness = std::strtoull(text.c_str() + 4, nullptr, 10);
    if (c.staleness >= 1) return c;
  }
  return InvalidArgument("consistency '" + text +
                         "' is not one of bsp, ssp:K (K from 1 to 999999: a worker may start "
                         "step t once every worker completed step t-K) or async");
}

double PerArrivalBeta1(double beta1, int workers) {
  if (workers < 1) return beta1;
  return std::max(0.0, beta1 - (1.0 - 1.0 / workers));
}

std::string Consistency::Name() const {
  switch (kind) {
    case Kind::kBsp:
      return "bsp";
    case Kind::kSsp:
      return "ssp:" + std::to_string(staleness);
    case Kind::kAsync:
      return "async";
  }
  return "bsp";
}

}  // namespace een
