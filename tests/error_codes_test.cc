// Errors keep their meaning across the wire (common/error_codes.h): every
// status code has its own wire code and comes back as itself, and an Error
// message read back is the Status it was made from.
#include "common/error_codes.h"

#include <gtest/gtest.h>

#include <set>

#include "common/wire.h"

namespace een {
namespace {

TEST(ErrorCodes, EveryStatusCodeTravelsAsItsOwnWireCodeAndComesBack) {
  std::set<int> wire_codes;
  for (int c = static_cast<int>(StatusCode::kInvalidArgument);
       c <= static_cast<int>(StatusCode::kJobFinished); ++c) {
    const auto code = static_cast<StatusCode>(c);
    const wire::ErrorCode on_wire = WireCodeOf(code);
    EXPECT_TRUE(wire_codes.insert(static_cast<int>(on_wire)).second)
        << StatusCodeName(code) << " shares its wire code with another";
    EXPECT_EQ(StatusCodeOf(on_wire), code) << StatusCodeName(code);
  }
  EXPECT_EQ(WireCodeOf(StatusCode::kStaleEpoch), wire::ErrorCode::STALE_EPOCH);
  EXPECT_EQ(WireCodeOf(StatusCode::kUnavailable), wire::ErrorCode::UNAVAILABLE)
      << "an unreachable peer is no stale epoch";
  EXPECT_EQ(StatusCodeOf(static_cast<wire::ErrorCode>(999)), StatusCode::kInternal);
}

TEST(ErrorCodes, AnErrorMessageReadsBackAsTheStatusItWasMadeFrom) {
  const Status sent = ResourceExhausted("ps 1: disk full");
  const transport::Message m = wire::MakeError(WireCodeOf(sent.code()), sent.message(), 7);
  Status read = Internal("not read");
  ASSERT_TRUE(wire::Visit(m, [&](wire::Header::Reader h) {
                read = StatusOf(h.getError(), "PS 1 refused this worker's request: ");
                return Status::Ok();
              }).ok());
  EXPECT_EQ(read.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(read.message(), "PS 1 refused this worker's request: ps 1: disk full");
}

}  // namespace
}  // namespace een
