#include "common/wire.h"

#include <cstring>
#include <new>

namespace een::wire {

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

transport::Message MakeError(ErrorCode code, const std::string& text, uint64_t request_id) {
  capnp::MallocMessageBuilder b;
  auto err = b.initRoot<Header>().initError();
  err.setCode(code);
  err.setMessage(text);
  err.setRequestId(request_id);
  return transport::Message{{Encode(b)}};
}

}  // namespace een::wire
