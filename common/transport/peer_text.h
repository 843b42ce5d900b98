// Shown: a peer's bytes (a name, an identity it claims) as a log line or an
// error may show them: at most `max` characters, each unprintable one as
// '?', so a stranger puts no line breaks or terminal escapes in the log.
#pragma once

#include <cctype>
#include <string>

namespace een {

inline std::string Shown(const std::string& peer_bytes, size_t max = 64) {
  std::string shown = peer_bytes.substr(0, max);
  for (char& c : shown) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return shown;
}

}  // namespace een
