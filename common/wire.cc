#include "common/wire.h"

#include <cstring>
#include <new>

namespace een::wire {

size_t ElementBytes(ElementType t) {
  switch (t) {
    case ElementType::F64:
    case ElementType::I64:
      return 8;
    case ElementType::F32:
    case ElementType::I32:
      return 4;
    case ElementType::F16:
    case ElementType::BF16:
      return 2;
    case ElementType::U8:
    case ElementType::I8:
      return 1;
  }
  return 0;
}

transport::Frame Encode(capnp::MessageBuilder& builder) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  return transport::Frame::Copy(bytes.begin(), bytes.size());
}

Status Visit(const transport::Message& message,
             const std::function<Status(Header::Reader)>& visit) {
  if (message.frames.empty()) return InvalidArgument("empty message (no header frame)");
  const transport::Frame& frame = message.frames[0];
  if (frame.size() == 0 || frame.size() % sizeof(capnp::word) != 0) {
    return InvalidArgument("header frame of " + std::to_string(frame.size()) +
                           " bytes is not a whole number of 8-byte words");
  }
  const size_t words = frame.size() / sizeof(capnp::word);
  kj::Array<capnp::word> aligned;
  const capnp::word* data = reinterpret_cast<const capnp::word*>(frame.data());
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(capnp::word) != 0) {
    aligned = kj::heapArray<capnp::word>(words);
    std::memcpy(aligned.begin(), frame.data(), frame.size());
    data = aligned.begin();
  }
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words * 4 + 64;
    options.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(data, words), options);
    return visit(reader.getRoot<Header>());
  } catch (const kj::Exception& e) {
    return InvalidArgument(std::string("malformed header: ") + e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    // A message that declares more than can be held (e.g. 2^62 elements).
    return ResourceExhausted("a message asked for more memory than there is; refused");
  } catch (const std::exception& e) {
    return Internal(std::string("handling a message failed: ") + e.what());
  }
}

transport::Message Outgoing::Take(std::vector<transport::Frame> payload) {
  transport::Message m;
  m.frames.reserve(1 + payload.size());
  m.frames.push_back(Encode());
  for (transport::Frame& f : payload) m.frames.push_back(std::move(f));
  return m;
}

transport::Message MakeError(ErrorCode code, const std::string& text, uint64_t request_id) {
  Outgoing out;
  auto err = out.header().initError();
  err.setCode(code);
  err.setMessage(text);
  err.setRequestId(request_id);
  return out.Take();
}

MembershipChange MembershipFromWire(Membership::Reader m) {
  MembershipChange change{m.getEffectiveStep(), {}, m.getEpoch()};
  for (int w : m.getLiveWorkers()) change.live.push_back(w);
  for (uint32_t s : m.getBatchShares()) change.shares.push_back(s);
  change.unfinished = UnfinishedFromWire(m.getUnfinished());
  change.data_step = m.getDataStep();
  return change;
}

void MembershipToWire(const MembershipChange& change, Membership::Builder m) {
  m.setEpoch(change.epoch);
  m.setEffectiveStep(change.step);
  auto live = m.initLiveWorkers(change.live.size());
  for (size_t j = 0; j < change.live.size(); ++j) live.set(j, change.live[j]);
  auto shares = m.initBatchShares(change.shares.size());
  for (size_t j = 0; j < change.shares.size(); ++j) shares.set(j, change.shares[j]);
  UnfinishedToWire(change.unfinished, m.initUnfinished(change.unfinished.size()));
  m.setDataStep(change.data_step);
}

void UnfinishedToWire(const std::vector<een::UnfinishedSteps>& unfinished,
                      ::capnp::List<UnfinishedSteps>::Builder list) {
  for (size_t i = 0; i < unfinished.size(); ++i) {
    list[i].setWorker(unfinished[i].worker);
    list[i].setFromStep(unfinished[i].from_step);
  }
}

std::vector<een::UnfinishedSteps> UnfinishedFromWire(::capnp::List<UnfinishedSteps>::Reader list) {
  std::vector<een::UnfinishedSteps> out;
  out.reserve(list.size());
  for (auto u : list) out.push_back({u.getWorker(), u.getFromStep()});
  return out;
}

DType DTypeOf(WireType type) {
  switch (type) {
    case WireType::kF32:
      return DType::F32;
    case WireType::kF16:
      return DType::F16;
    case WireType::kBF16:
      return DType::BF16;
  }
  return DType::F32;  // unreachable: WireType has no other value
}

Result<WireType> WireTypeOf(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::F32:
      return WireType::kF32;
    case DType::F16:
      return WireType::kF16;
    case DType::BF16:
      return WireType::kBF16;
  }
  return InvalidArgument(what + " dtype " + std::to_string(static_cast<int>(dtype)) +
                         " is not one of f32, bf16, f16");
}

}  // namespace een::wire
