// SimulatedHosts: "hosts" for multi-host tests on one machine. Each is a
// network namespace of its own (its own loopback and one address,
// 10.77.X.(i+1)/24, on a bridge in one more namespace, the "switch"), so
// processes in different hosts reach each other only over that bridge, as
// across a network; the machine's own network is untouched. Needs root
// (network namespaces) and iproute2; ok() says whether the hosts exist,
// why_not() why not. The destructor kills every process left in them and
// removes the namespaces (links and bridge go with them).
// Thread safety: none (one test thread).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace een::testing {

class SimulatedHosts {
 public:
  explicit SimulatedHosts(int count);
  ~SimulatedHosts();
  SimulatedHosts(const SimulatedHosts&) = delete;

  bool ok() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }
  int count() const { return static_cast<int>(names_.size()); }
  // Host i's network namespace.
  const std::string& Name(int i) const { return names_[i]; }
  // Host i's address on the bridge.
  std::string Address(int i) const;
  // `argv` run inside host i (`ip netns exec NAME argv...`: the same pid).
  std::vector<std::string> In(int i, const std::vector<std::string>& argv) const;
  // `argv` run inside the switch, where `SwitchPort(i)` is the interface
  // of host i's link: what passes it is what a tap on that cable sees.
  std::vector<std::string> InSwitch(const std::vector<std::string>& argv) const;
  static std::string SwitchPort(int i) { return "port" + std::to_string(i); }
  // Every process inside host i.
  std::vector<pid_t> Pids(int i) const;
  // The whole host lost at once: SIGKILL to every process in it, and its
  // link taken down (nothing more goes in or out).
  void Lose(int i);
  // Host i back on the network (its link up again), with nothing running.
  void Recover(int i);

 private:
  std::string subnet_;              // "10.77.X"
  std::string switch_;              // the namespace of the bridge
  std::vector<std::string> names_;  // namespaces
  std::string why_not_;
};

}  // namespace een::testing
