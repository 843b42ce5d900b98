#include "launcher/forwarded_environment.h"

#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace een {
namespace {

constexpr size_t kMaxEntry = 128 * 1024;
constexpr size_t kMaxTotal = 1024 * 1024;

bool ValidName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '_') return false;
  }
  return true;
}

}  // namespace

bool IsForwarded(const std::string& name) {
  // The session's own, the job secret's (it travels on its own line) and a
  // process's own credential (each host's een-launch writes its workers').
  static const std::array<const char*, 21> kSession = {"HOME",
                                                       "USER",
                                                       "LOGNAME",
                                                       "SHELL",
                                                       "PWD",
                                                       "OLDPWD",
                                                       "SHLVL",
                                                       "TERM",
                                                       "COLORTERM",
                                                       "DISPLAY",
                                                       "MAIL",
                                                       "_",
                                                       "HOSTNAME",
                                                       "TMUX",
                                                       "TMUX_PANE",
                                                       "STY",
                                                       "WINDOW",
                                                       "LS_COLORS",
                                                       "EEN_JOB_SECRET",
                                                       "EEN_JOB_SECRET_FILE",
                                                       "EEN_JOB_CREDENTIAL_FILE"};
  static const std::array<const char*, 4> kSessionPrefixes = {"SSH_", "XDG_", "BASH_FUNC_",
                                                              "DBUS_"};
  if (!ValidName(name)) return false;
  for (const char* s : kSession) {
    if (name == s) return false;
  }
  for (const char* p : kSessionPrefixes) {
    if (name.rfind(p, 0) == 0) return false;
  }
  return true;
}

std::string EncodeForwardedEnvironment(const char* const* environment,
                                       const std::set<std::string>& also) {
  std::string out;
  for (const char* const* e = environment; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || entry.size() + 1 > kMaxEntry) continue;
    const std::string name = entry.substr(0, eq);
    const bool asked = also.count(name) > 0 && ValidName(name) &&
                       name.rfind("EEN_JOB_SECRET", 0) != 0 && name != "EEN_JOB_CREDENTIAL_FILE";
    if (!IsForwarded(name) && !asked) continue;
    if (out.size() + entry.size() + 2 > kMaxTotal) break;
    out += entry;
    out += '\0';
  }
  out += '\0';
  return out;
}

Result<std::pair<std::string, std::optional<std::string>>> ParseEnvFlag(const std::string& text) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  if (!ValidName(name)) {
    return InvalidArgument("--env " + text +
                           ": not NAME or NAME=VALUE (a name of letters, digits and _)");
  }
  if (name.rfind("EEN_", 0) == 0) {
    return InvalidArgument("--env " + text + ": EEN_* variables are een-launch's own");
  }
  if (eq != std::string::npos) {
    return std::make_pair(name, std::optional<std::string>(text.substr(eq + 1)));
  }
  if (std::getenv(name.c_str()) == nullptr) {
    return InvalidArgument("--env " + name + ": " + name +
                           " is not set here (give its value: --env " + name + "=VALUE)");
  }
  return std::make_pair(name, std::optional<std::string>());
}

Result<EnvironmentEntries> ReadForwardedEnvironment(int fd) {
  EnvironmentEntries entries;
  std::string entry;
  size_t total = 0;
  while (true) {
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) {
      return FailedPrecondition(
          "--stdin-env: stdin ended inside the forwarded environment (the ssh backend sends it "
          "after the secret; was this een-launch started by hand?)");
    }
    if (++total > kMaxTotal) {
      return InvalidArgument("--stdin-env: the forwarded environment is over 1 MiB");
    }
    if (c != '\0') {
      if (entry.size() >= kMaxEntry) {
        return InvalidArgument("--stdin-env: a forwarded variable is over 128 KiB");
      }
      entry += c;
      continue;
    }
    if (entry.empty()) return entries;
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, std::min(eq, entry.size()));
    if (eq == std::string::npos || !ValidName(name)) {
      return InvalidArgument("--stdin-env: '" + name.substr(0, 64) +
                             "' is not NAME=VALUE with a variable's name");
    }
    entries.emplace_back(name, entry.substr(eq + 1));
    entry.clear();
  }
}

void ApplyForwardedEnvironment(const EnvironmentEntries& entries) {
  for (const auto& [name, value] : entries) setenv(name.c_str(), value.c_str(), 1);
}

}  // namespace een
