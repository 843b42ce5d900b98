#include "support/simulated_hosts.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace een::testing {
namespace {

// Runs a shell command; its output is swallowed. True on exit status 0.
bool Sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

std::string Output(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

}  // namespace

SimulatedHosts::SimulatedHosts(int count) {
  const long tag = getpid() % 100000;
  subnet_ = "10.77." + std::to_string(getpid() % 250);
  bridge_ = "eenbr" + std::to_string(tag);
  if (geteuid() != 0) {
    why_not_ = "simulated hosts need root (network namespaces)";
    return;
  }
  if (!Sh("ip link add " + bridge_ + " type bridge") || !Sh("ip link set " + bridge_ + " up")) {
    why_not_ = "cannot create a bridge (ip link add ... type bridge): no CAP_NET_ADMIN here?";
    return;
  }
  for (int i = 0; i < count; ++i) {
    const std::string ns = "een" + std::to_string(tag) + "h" + std::to_string(i);
    const std::string outside = "ev" + std::to_string(tag) + "h" + std::to_string(i);
    const std::string inside = "eth0";
    const std::string in = "ip netns exec " + ns + " ";
    const bool made =
        Sh("ip netns add " + ns) && (names_.push_back(ns), true) &&
        Sh("ip link add " + outside + " type veth peer name " + inside + " netns " + ns) &&
        Sh("ip link set " + outside + " master " + bridge_ + " up") &&
        Sh(in + "ip addr add " + Address(i) + "/24 dev " + inside) &&
        Sh(in + "ip link set " + inside + " up") && Sh(in + "ip link set lo up");
    if (!made) {
      why_not_ = "cannot set up network namespace " + ns + " (ip netns add / veth)";
      return;
    }
  }
}

SimulatedHosts::~SimulatedHosts() {
  for (int i = 0; i < count(); ++i) {
    for (pid_t pid : Pids(i)) kill(pid, SIGKILL);
  }
  for (int i = 0; i < count(); ++i) {
    // The kernel removes a namespace's processes' last references a moment
    // after SIGKILL; the namespace file goes at once.
    Sh("ip netns del " + names_[i]);
  }
  Sh("ip link del " + bridge_);
}

std::string SimulatedHosts::Address(int i) const { return subnet_ + "." + std::to_string(i + 1); }

std::vector<std::string> SimulatedHosts::In(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"ip", "netns", "exec", names_[i]};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<pid_t> SimulatedHosts::Pids(int i) const {
  std::istringstream in(Output("ip netns pids " + names_[i] + " 2>/dev/null"));
  std::vector<pid_t> pids;
  pid_t pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

void SimulatedHosts::Lose(int i) {
  // Again until none is left: a dying launcher's children may still fork.
  for (int round = 0; round < 20; ++round) {
    const std::vector<pid_t> pids = Pids(i);
    if (pids.empty()) break;
    for (pid_t pid : pids) kill(pid, SIGKILL);
  }
  Sh("ip netns exec " + names_[i] + " ip link set eth0 down");
}

}  // namespace een::testing
