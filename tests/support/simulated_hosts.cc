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
  const std::string tag = "een" + std::to_string(getpid() % 100000);
  subnet_ = "10.77." + std::to_string(getpid() % 250);
  switch_ = tag + "sw";
  if (geteuid() != 0) {
    why_not_ = "simulated hosts need root (network namespaces)";
    return;
  }
  // The bridge lives in a namespace of its own (the "switch"): nothing of
  // the test touches the machine's own network.
  const std::string sw = "ip netns exec " + switch_ + " ";
  if (!Sh("ip netns add " + switch_) || !Sh(sw + "ip link add br0 type bridge") ||
      !Sh(sw + "ip link set br0 up")) {
    why_not_ =
        "cannot create the switch namespace and its bridge (ip netns add, ip link add "
        "type bridge): is iproute2 installed, and CAP_NET_ADMIN given?";
    return;
  }
  for (int i = 0; i < count; ++i) {
    const std::string ns = tag + "h" + std::to_string(i);
    const std::string port = SwitchPort(i);
    const std::string in = "ip netns exec " + ns + " ";
    const bool made =
        Sh("ip netns add " + ns) && (names_.push_back(ns), true) &&
        Sh("ip -n " + switch_ + " link add " + port + " type veth peer name eth0 netns " + ns) &&
        Sh(sw + "ip link set " + port + " master br0 up") &&
        Sh(in + "ip addr add " + Address(i) + "/24 dev eth0") && Sh(in + "ip link set eth0 up") &&
        Sh(in + "ip link set lo up");
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
  for (int i = 0; i < count(); ++i) Sh("ip netns del " + names_[i]);
  Sh("ip netns del " + switch_);  // its bridge and ports go with it
}

std::string SimulatedHosts::Address(int i) const { return subnet_ + "." + std::to_string(i + 1); }

std::vector<std::string> SimulatedHosts::In(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"ip", "netns", "exec", names_[i]};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> SimulatedHosts::InSwitch(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"ip", "netns", "exec", switch_};
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

void SimulatedHosts::Recover(int i) { Sh("ip netns exec " + names_[i] + " ip link set eth0 up"); }

}  // namespace een::testing
