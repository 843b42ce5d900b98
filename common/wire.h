// Encoding and safe decoding of the Cap'n Proto header frame.
//
// Decode() copies the header into word-aligned memory when needed and
// limits traversal to the frame's own size. Reading a malformed header may
// throw kj::Exception at any field access, so all reading happens inside
// Visit(), which turns any such exception into InvalidArgument; an
// exception the handler throws (std::bad_alloc for a declared size nobody
// can hold, or any other) becomes a Status too, so no message can end a
// process that handles it through Visit().
// Thread safety: free functions; no shared state.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <functional>
#include <vector>

#include "common/status.h"
#include "common/transport/frame.h"
#include "common/wire_dtype.h"
#include "een/membership.h"
#include "schema/een.capnp.h"

namespace een::wire {

// Bytes of one element of a collective's dtype (0: a type this build does
// not know).
size_t ElementBytes(ElementType t);

// Serializes a built header into a frame.
transport::Frame Encode(capnp::MessageBuilder& builder);

// Marks a control message with who sends it.
inline void SetSender(Header::Builder header, Role role, int rank) {
  auto sender = header.initSender();
  sender.setRole(role);
  sender.setRank(rank);
}

// One message on its way out: every role builds its messages with this, so
// a header is made, signed with its sender and framed in one place.
//   wire::Outgoing out(wire::Role::PS, rank);
//   out.header().initMembershipPrepared().setEpoch(epoch);
//   control->Send(out.Take());
// Take() gives the header frame followed by `payload`; Encode() only the
// header frame (for a message whose payload frames are already in place).
class Outgoing {
 public:
  Outgoing() : header_(builder_.initRoot<Header>()) {}
  Outgoing(Role role, int rank) : Outgoing() { SetSender(header_, role, rank); }
  Outgoing(const Outgoing&) = delete;
  Outgoing& operator=(const Outgoing&) = delete;

  Header::Builder header() { return header_; }
  transport::Frame Encode() { return wire::Encode(builder_); }
  transport::Message Take(std::vector<transport::Frame> payload = {});

 private:
  capnp::MallocMessageBuilder builder_;
  Header::Builder header_;
};

// Calls `visit` with the header of `message`; any decoding failure, in the
// header itself or while `visit` reads it, becomes InvalidArgument.
Status Visit(const transport::Message& message, const std::function<Status(Header::Reader)>& visit);

// A message that says `code: text` in answer to request `request_id`.
transport::Message MakeError(ErrorCode code, const std::string& text, uint64_t request_id = 0);

// A membership change on the wire (the one type, een/membership.h) and back.
MembershipChange MembershipFromWire(Membership::Reader m);
void MembershipToWire(const MembershipChange& change, Membership::Builder m);
// Lost workers' unfinished steps (een/membership.h) into a list initialized
// to their count, and back (unchecked: each consumer checks them).
void UnfinishedToWire(const std::vector<een::UnfinishedSteps>& unfinished,
                      ::capnp::List<UnfinishedSteps>::Builder list);
std::vector<een::UnfinishedSteps> UnfinishedFromWire(::capnp::List<UnfinishedSteps>::Reader list);

// A payload dtype on the wire and back, checked: a value the schema does
// not define is InvalidArgument naming `what` ("push payload"), never cast.
DType DTypeOf(WireType type);
Result<WireType> WireTypeOf(DType dtype, const std::string& what);

}  // namespace een::wire
