// Fuzz target: decoding any header frame a peer can send, of every message
// kind: wire::Visit, a full traversal of whatever it holds (capnp's own
// stringify reads every field), and the decoders the roles apply to the
// nested specs (tensors, optimizer, shard map). None may crash, whatever
// the bytes; each must answer a value or an error.
#include <capnp/message.h>
#include <kj/string.h>

#include "common/optimizer_wire.h"
#include "common/shard_map.h"
#include "common/wire.h"
#include "fuzz/message_frames.h"

using namespace een;

namespace {

void DecodeNested(wire::Header::Reader h) {
  switch (h.which()) {
    case wire::Header::REGISTER: {
      auto r = h.getRegister();
      (void)TensorsFromWire(r.getTensors());  // errors are answers, not crashes
      (void)OptimizerFromWire(r.getOptimizer());
      break;
    }
    case wire::Header::JOB_START: {
      auto s = h.getJobStart();
      (void)ShardMap::FromWire(s.getMap());
      (void)OptimizerFromWire(s.getOptimizer());
      break;
    }
    case wire::Header::MAP_CHANGE:
      (void)ShardMap::FromWire(h.getMapChange());
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  transport::Message m = fuzz::MessageOf(data, size);
  (void)wire::Visit(m, [](wire::Header::Reader h) {
    kj::String all = kj::str(h);  // reads every field, lists and text included
    DecodeNested(h);
    return all.size() > 0 ? Status::Ok() : InvalidArgument("empty");
  });
  return 0;
}
