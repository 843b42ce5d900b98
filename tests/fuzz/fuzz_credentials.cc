// Fuzz target: what a peer or a file can put before a listener's
// authentication decision. The input is taken three ways:
//   - as the frames of a ZAP request (message_frames.h's layout): ZeroMQ
//     fills the frames from what the peer sent (its PLAIN identity and
//     password, its CURVE key), and ZapGate decides;
//   - as a CURVE peer's routing id: ProvenIdentity checks its proof;
//   - as a credential file (written 0600): ReadCredentialFile parses it.
// None may crash; an admitted request must name the identity whose key it
// gave, and a proven routing id must start with the identity it proves.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/transport/auth.h"
#include "common/transport/zmq/zmq_zap.h"
#include "fuzz/job_secret.h"
#include "fuzz/message_frames.h"
#include "fuzz/scratch_path.h"

using namespace een;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string secret = fuzz::kJobSecret;
  static const transport::ZapGate gate(secret);
  static fuzz::ScratchPath scratch("credential");

  const transport::Message m = fuzz::MessageOf(data, size);
  std::vector<std::string> request;
  for (const auto& f : m.frames) request.push_back(f.ToString());
  const transport::ZapAnswer a = gate.Answer(request);
  if (a.admitted && request.size() == 8 && transport::PasswordFor(secret, a.user) != request[7]) {
    std::abort();  // admitted with another identity's key
  }

  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string proven = transport::ProvenIdentity(secret, bytes);
  if (!proven.empty() && bytes.compare(0, proven.size() + 1, proven + "/") != 0) std::abort();

  {
    std::ofstream out(scratch.path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  chmod(scratch.string().c_str(), 0600);
  (void)transport::ReadCredentialFile(scratch.string());
  return 0;
}
