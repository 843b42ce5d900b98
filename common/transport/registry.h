// Transport registry: the one place that knows which backends exist.
//
// Roles name a data-plane transport ("tcp", "ipc", "shm"; "mem" in unit
// tests) or hold an address with a scheme ("tcp://HOST:PORT",
// "ipc:///PATH", "shm:///PATH", "mem://NAME"), and get everything
// backend-specific from here: the device for an address, the address to
// listen on, cleaning up after a dead process, the hardware line for the
// start-up log. No role includes a backend's header (the build checks it,
// cmake/Layering.cmake); adding a backend touches its own folder, this
// registry and the transport tests.
// Thread safety: every function may be called from any thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport/device.h"

namespace een::transport {

// The process-wide device serving `address`'s scheme on `lane`; created on
// first use (after any fork()). Unknown schemes are InvalidArgument.
Result<Device*> DeviceFor(const std::string& address, Lane lane = Lane::kDefault);

// OK when `transport` names a data-plane backend users may choose (with
// `tests_too`, also the in-process one); else InvalidArgument listing them,
// `what` naming the setting ("transport", "EEN_DATA_TRANSPORT").
Status CheckTransport(const std::string& transport, const std::string& what, bool tests_too);

// The data-plane choice "auto": shared memory between processes of one
// host, tcp between hosts, per pair of processes (a PS listens on both;
// each peer picks by host, shard_map.h AddressFor).
inline constexpr const char* kPerPair = "auto";

// Where a process of this host listens on `transport`: one address, or for
// kPerPair the tcp one (reachable from any host) then the shm one.
std::vector<std::string> ListenAddresses(const std::string& transport, const std::string& host,
                                         const std::string& run_dir, const std::string& name);

// Where a process of this host listens on `transport`: `name` (unique per
// process, e.g. "ps-1-4242") becomes a socket under `run_dir` for ipc and
// shm, a port chosen by the system on `host` for tcp.
std::string ListenAddress(const std::string& transport, const std::string& host,
                          const std::string& run_dir, const std::string& name);

// One listener on every address of `addresses` (at least one; for example
// tcp for other hosts and shm for this one): a message from any of them is
// received, a reply goes back the way its request came. Unavailable when
// one cannot listen; InvalidArgument for a backend that cannot be waited
// on with the others (mem).
Result<std::unique_ptr<Listener>> ListenOnAll(const std::vector<std::string>& addresses);

// True when frames pointing into memory from `address`'s device Allocate()
// are sent without a copy (shm); elsewhere plain memory serves as well.
bool SendsInPlace(const std::string& address);

// Removes what a dead process `pid` of this host left behind (the shm
// backend's /dev/shm blocks). Safe to call for any pid.
void RemoveLeftoversOf(pid_t pid);

// One line on the transport hardware (RDMA devices, or why there is none).
std::string DescribeHardware();

}  // namespace een::transport
