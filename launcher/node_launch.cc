#include "launcher/node_launch.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/job_env.h"
#include "common/transport/auth.h"
#include "launcher/forwarded_environment.h"
#include "launcher/job_supervisor.h"
#include "launcher/leftovers.h"
#include "launcher/local_host.h"
#include "launcher/say.h"

namespace een {
namespace {

Status SplitRdzv(const std::string& rdzv, std::string* host, int* port) {
  if (Status s = SplitHostPort(rdzv, host, port); !s.ok()) {
    return InvalidArgument("--rdzv " + s.message() +
                           " (--rdzv HOST:PORT: node 0's address and a free port, e.g. "
                           "--rdzv 10.0.0.1:29500)");
  }
  return Status::Ok();
}

// The first address `host` resolves to (IPv4 first), numeric.
Result<sockaddr_storage> Resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found) {
    return Unavailable("cannot resolve the rendezvous host '" + host + "' (" + gai_strerror(rc) +
                       "): give node 0's address in --rdzv");
  }
  sockaddr_storage out{};
  const addrinfo* pick = found;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  std::memcpy(&out, pick->ai_addr, pick->ai_addrlen);
  freeaddrinfo(found);
  return out;
}

std::string Numeric(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof text);
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof text);
  }
  return text;
}

bool IsLoopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address == "localhost";
}

// Whether a socket can be bound to `address` (port 0: any).
Status CanListenOn(sockaddr_storage address) {
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + std::strerror(errno));
  if (address.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(address).sin_port = 0;
  } else {
    reinterpret_cast<sockaddr_in6&>(address).sin6_port = 0;
  }
  const bool ok =
      bind(fd, reinterpret_cast<const sockaddr*>(&address),
           address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)) == 0;
  const int err = errno;
  close(fd);
  return ok ? Status::Ok() : Unavailable(std::strerror(err));
}

// This host's address on the route to `peer` (no packet is sent).
Result<std::string> AddressToward(sockaddr_storage peer) {
  const int fd = socket(peer.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + std::strerror(errno));
  if (peer.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(peer).sin_port = htons(9);
  } else {
    reinterpret_cast<sockaddr_in6&>(peer).sin6_port = htons(9);
  }
  sockaddr_storage self{};
  socklen_t len = sizeof self;
  const bool ok =
      connect(fd, reinterpret_cast<const sockaddr*>(&peer),
              peer.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) {
    return Unavailable("no route from this host to the rendezvous address (" +
                       std::string(std::strerror(err)) +
                       "): check the network, or give this node's address with --host");
  }
  return Numeric(self);
}

// This node's share of `what` (PS or workers): `per_node` each, or
// `total` split node-rank-major (the first total % N nodes one more).
Status ShareOf(const std::string& what, int per_node, int total, const NodeLaunch* node, int* job,
               int* first, int* here) {
  const int64_t n = node->nnodes, r = node->node_rank;
  const std::string flag = what == "PS" ? "ps" : "workers";
  if (per_node >= 0 && total >= 0) {
    return InvalidArgument("give --" + flag + "-per-node or --" + flag + ", not both");
  }
  if (per_node < 0 && total < 0) {
    return InvalidArgument("--nnodes needs --" + flag + "-per-node (on each node) or --" + flag +
                           " (the job's, split over the nodes)");
  }
  // int64: the job's total must fit the ranks' int.
  const int64_t job_total = per_node >= 0 ? n * per_node : total;
  const int64_t least = what == "PS" ? 0 : 1;  // --ps 0: a program with its own gradients' path
  if (job_total < least || job_total > 65536) {
    return InvalidArgument("the job's " + what + " would be " + std::to_string(job_total) +
                           ": give " + std::to_string(least) + " to 65536 in all");
  }
  const int64_t base = job_total / n, extra = job_total % n;
  *job = static_cast<int>(job_total);
  *here = static_cast<int>(base + (r < extra ? 1 : 0));
  *first = static_cast<int>(r * base + std::min(r, extra));
  return Status::Ok();
}

// "FIRST:COUNT" of a job's `total` (empty: keep the share computed).
Status ExplicitShare(const std::string& flag, const std::string& text, int total, int* first,
                     int* here) {
  if (text.empty()) return Status::Ok();
  long a = -1, b = -1;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%ld:%ld%c", &a, &b, &tail) != 2 || a < 0 || b < 0 ||
      a + b > total) {
    return InvalidArgument(flag + " '" + text + "' is not FIRST:COUNT within the job's " +
                           std::to_string(total));
  }
  *first = static_cast<int>(a);
  *here = static_cast<int>(b);
  return Status::Ok();
}

Result<std::string> SharedSecret(const NodeLaunchFlags& flags) {
  if (flags.insecure) return std::string();
  if (flags.stdin_secret) {  // the ssh backend's: one line, then stdin stays open
    std::string secret;
    char c;
    while (secret.size() <= 256 && read(STDIN_FILENO, &c, 1) == 1 && c != '\n') secret += c;
    if (secret.size() < 32 || secret.size() > 128) {
      return FailedPrecondition(
          "--stdin-secret: no job secret on stdin (the ssh backend sends it)");
    }
    return secret;
  }
  if (!flags.secret_file.empty()) return transport::ReadSecretFile(flags.secret_file);
  const char* text = std::getenv("EEN_JOB_SECRET");
  if (text && *text) {
    const std::string secret = text;
    if (secret.size() < 32 || secret.size() > 128) {
      return InvalidArgument("EEN_JOB_SECRET holds " + std::to_string(secret.size()) +
                             " characters; a job secret has 32 to 128");
    }
    return secret;
  }
  return FailedPrecondition(
      "a per-node launch needs the job secret every node shares: create one with "
      "`een-launch --new-secret FILE`, copy FILE to every node (mode 0600), and give "
      "--secret-file FILE to each een-launch (or set EEN_JOB_SECRET to its text); --insecure "
      "runs without one, on a network nobody else can reach");
}

// The network interface that holds `address` ("" when none does).
std::string InterfaceOf(const std::string& address) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string name;
  for (ifaddrs* i = all; i && name.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    sockaddr_storage a{};
    std::memcpy(&a, i->ifa_addr,
                i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    if (Numeric(a) == address) name = i->ifa_name;
  }
  freeifaddrs(all);
  return name;
}

}  // namespace

Status SplitHostPort(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("'" + text + "' has no port");
  }
  *host = text.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || p < 1 || p > 65535) {
    return InvalidArgument("'" + text + "': port '" + port_text + "' is not 1-65535");
  }
  *port = static_cast<int>(p);
  return Status::Ok();
}

Result<NodeLaunch> MakeNodeLaunch(const NodeLaunchFlags& flags) {
  NodeLaunch node;
  if (flags.nnodes < 1) return InvalidArgument("--nnodes must be at least 1");
  if (flags.node_rank == -1) {
    return InvalidArgument("--nnodes needs --node-rank R: this host's rank, 0.." +
                           std::to_string(flags.nnodes - 1) + " (node 0 runs the coordinator)");
  }
  if (flags.node_rank < 0 || flags.node_rank >= flags.nnodes) {
    return InvalidArgument("--node-rank " + std::to_string(flags.node_rank) + " is not in 0.." +
                           std::to_string(flags.nnodes - 1) +
                           " (give each node its own rank, node 0 first)");
  }
  if (flags.rdzv.empty()) {
    return InvalidArgument(
        "--nnodes needs --rdzv HOST:PORT: node 0's address, where the launchers meet");
  }
  node.nnodes = flags.nnodes;
  node.node_rank = flags.node_rank;
  if (flags.min_nodes > 0) {
    if (flags.ps_per_node < 0 || flags.workers_per_node < 0 || !flags.ps_share.empty()) {
      return InvalidArgument(
          "--nnodes MIN:MAX needs --ps-per-node and --workers-per-node (every node the same; "
          "the job's totals follow from the nodes that come)");
    }
    if (flags.min_nodes > flags.nnodes) {
      return InvalidArgument("--nnodes " + std::to_string(flags.min_nodes) + ":" +
                             std::to_string(flags.nnodes) + ": MIN is more than MAX");
    }
    node.elastic = ElasticNodes{flags.min_nodes, flags.nnodes, flags.ps_per_node,
                                flags.workers_per_node, flags.last_call};
  }
  EEN_RETURN_IF_ERROR(
      ShareOf("PS", flags.ps_per_node, flags.ps, &node, &node.ps, &node.first_ps, &node.ps_here));
  EEN_RETURN_IF_ERROR(ShareOf("workers", flags.workers_per_node, flags.workers, &node,
                              &node.workers, &node.first_worker, &node.workers_here));
  if (node.elastic.enabled()) {  // the first MIN nodes' totals, until the rendezvous says
    node.ps = flags.min_nodes * flags.ps_per_node;
    node.workers = flags.min_nodes * flags.workers_per_node;
    if (node.ps < 1 || node.workers < 1) {
      return InvalidArgument("an elastic job needs at least one PS and one worker on its first " +
                             std::to_string(flags.min_nodes) + " node(s)");
    }
  }
  EEN_RETURN_IF_ERROR(
      ExplicitShare("--node-ps", flags.ps_share, node.ps, &node.first_ps, &node.ps_here));
  EEN_RETURN_IF_ERROR(ExplicitShare("--node-workers", flags.workers_share, node.workers,
                                    &node.first_worker, &node.workers_here));
  node.watch_stdin = flags.stdin_secret || flags.stdin_env;
  node.rdzv = flags.rdzv;
  std::string host;
  int port = 0;
  EEN_RETURN_IF_ERROR(SplitRdzv(flags.rdzv, &host, &port));
  // Node 0's name may not resolve yet (its pod or host is starting): retry.
  const auto deadline = std::chrono::steady_clock::now() + flags.resolve_timeout;
  auto resolved = Resolve(host);
  for (bool said = false; !resolved.ok() && std::chrono::steady_clock::now() < deadline;
       resolved = Resolve(host)) {
    if (!said) {
      std::fprintf(stderr, "een-launch: %s; trying again for up to %lld ms\n",
                   resolved.status().message().c_str(),
                   static_cast<long long>(flags.resolve_timeout.count()));
      said = true;
    }
    usleep(500000);
  }
  EEN_ASSIGN_OR_RETURN(sockaddr_storage rdzv, std::move(resolved));
  const std::string ip = Numeric(rdzv);
  node.coordinator_address =
      "tcp://" + (rdzv.ss_family == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
  if (!flags.host.empty()) {
    node.address = flags.host;
  } else {
    EEN_ASSIGN_OR_RETURN(node.address, AddressToward(rdzv));
  }
  // Other nodes reach this one's roles at its address: not loopback (unless
  // node 0 is on loopback too: every node on this machine) nor a wildcard.
  const bool rdzv_loopback = IsLoopback(ip);
  if (node.address == "0.0.0.0" || node.address == "::" || node.address == "*" ||
      (IsLoopback(node.address) && !rdzv_loopback)) {
    return InvalidArgument("--host " + node.address +
                           ": the other nodes cannot reach this node's roles there; give an "
                           "address of this host that node 0 reaches (by default, the one on "
                           "the route to node 0)");
  }
  if (node.hosts_coordinator()) {
    // Node 0's coordinator listens on the rendezvous address: one of its own.
    if (Status s = CanListenOn(rdzv); !s.ok()) {
      return InvalidArgument("--rdzv " + flags.rdzv +
                             ": node 0 runs the coordinator there, "
                             "but " +
                             ip + " is not an address of this host (" + s.message() +
                             "); give node 0's own address, or run this as another --node-rank");
    }
  }
  node.name = HostName() + "@" + node.address;
  EEN_ASSIGN_OR_RETURN(node.secret, SharedSecret(flags));
  if (flags.stdin_env) {
    EEN_ASSIGN_OR_RETURN(const EnvironmentEntries forwarded,
                         ReadForwardedEnvironment(STDIN_FILENO));
    ApplyForwardedEnvironment(forwarded);
  }
  return node;
}

int RunNodeJob(JobConfig config, const NodeLaunch& node, const std::vector<std::string>& command,
               const std::string& bin_dir) {
  SayPrefix() = "[een-launch node " + std::to_string(node.node_rank) + "]";
  if (node.elastic.enabled() && node.elastic.ps_per_node > 0 && config.replicas < 2 &&
      config.snapshot_every == 0) {
    Say("warning: --nnodes " + std::to_string(node.elastic.min) + ":" +
        std::to_string(node.elastic.max) +
        " without --replicas 2 (or --snapshot-every): nodes come and go, but losing one whose "
        "PS hold shards ends the job; with --replicas 2 it fails over and goes on");
  }
  config.ps = node.ps;
  config.workers = node.workers;
  config.host = node.address;
  // A job whose failed worker no replacement can stand in for starts again whole, on every
  // node (JobSupervisor::wants_restart), as torchrun does.
  for (int restart = 0;; ++restart) {
    const std::string run_dir = NewRunFolder();  // "": the supervisor says why and fails
    JobPlan plan(config, command, bin_dir, run_dir);
    plan.set_node(node.name, node.workers_here);
    if (node.nnodes > 1) plan.set_torch_interface(InterfaceOf(node.address));
    if (node.hosts_coordinator()) plan.set_coordinator_listen(node.coordinator_address);
    plan.set_elastic(node.elastic);
    LocalHost host;
    JobSupervisor supervisor(
        std::move(plan), &host, [&host](const std::string&, int) { return &host; }, node, restart);
    const int code = supervisor.Run();
    if (!supervisor.wants_restart()) return code;
  }
}

}  // namespace een
