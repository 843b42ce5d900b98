// CollectiveTable: a PS's side of the `een` backend's collectives
// (schema/een.capnp Reduce): the parts of collective calls waiting for
// their contributors, and the result once the last one came.
//
// A part is named by (group, seq, offset). Each contribution is checked on
// its own (sizes with overflow-safe arithmetic, its rank, the op and dtype
// pair) and against the part's first one (every contributor must send the
// same op, dtype, numel, total, contributors and root). The result is
// reduced in rank order, so every contributor gets the same bytes, and the
// same bytes whatever order they came in: f16/bf16 are widened to float and
// rounded back after each rank's addition, integers wrap as torch's do.
// A part that cannot complete (the members disagree, or a member left the
// job: finished, or lost where the job does not go on without it) answers
// every contributor, those that came and those still to come, with the
// reason. A member the job goes on without (--min-workers) is absent: its
// groups' parts complete over the others (a float sum scaled by group size
// / members present, so a mean stays the survivors' mean; a broadcast from
// it, or an all_gather, fails).
// Once a call of a group completed here, parts of its earlier calls still
// waiting are orphans (their members sent them to a PS since lost) and are
// dropped.
// Bytes held are capped (a contribution over the cap is refused), and so
// is the number of parts waiting. A result is written once, into a frame
// from the maker given (the listener's: one every contributor reads in
// place where the transport can), and sent to every contributor as is.
// Thread safety: none (the PS's receiving thread owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "common/transport/connection.h"
#include "common/transport/frame.h"
#include "common/wire.h"

namespace een {

struct CollectiveContribution {
  uint32_t group = 0;
  uint64_t seq = 0;
  int32_t rank = 0;
  int32_t contributors = 0;
  wire::ReduceOp op = wire::ReduceOp::SUM;
  wire::ElementType dtype = wire::ElementType::F32;
  uint64_t offset = 0, numel = 0, total = 0;
  int32_t root = 0;
  std::vector<int32_t> members;  // job worker ranks by group rank (empty: the same numbers)
  transport::PeerId from;
  const std::byte* data = nullptr;  // numel elements (broadcast: only the root's)
  size_t bytes = 0;
  // The received frame holding `data`: kept as is (no copy) while the part
  // waits. Empty: `data` is copied.
  transport::Frame frame;
};

// A part every contributor has sent (or one that failed): whom to answer
// and with what.
struct CollectiveResult {
  uint32_t group = 0;
  uint64_t seq = 0;
  uint64_t offset = 0;
  std::vector<transport::PeerId> to;  // every contributor heard so far, in rank order
  transport::Frame result;            // empty when `error` is set
  std::string error;
  std::vector<int32_t> absent;  // group ranks lost before sending their part
};

// The cap on a PS's collective bytes in flight: EEN_COLLECTIVE_BYTES, or
// 4 GiB.
size_t CollectiveBytesCap();

class CollectiveTable {
 public:
  using FrameMaker = std::function<Result<transport::WritableFrame>(size_t)>;
  // Results in frames of `make_frame` (none, or when it fails: heap memory).
  explicit CollectiveTable(size_t byte_cap, FrameMaker make_frame = nullptr)
      : byte_cap_(byte_cap), make_frame_(std::move(make_frame)) {}
  void set_frame_maker(FrameMaker make_frame) { make_frame_ = std::move(make_frame); }

  // A contribution that is wrong on its own (a bad size, rank or op) is an
  // error for its sender only. Otherwise returns the part's answer when
  // this contribution completed it, or made it fail, or came for a part
  // that failed before (then only to its sender).
  Result<std::optional<CollectiveResult>> Add(const CollectiveContribution& c);

  // Worker `worker` left the job (finished or lost): every part that waits
  // for it fails (the answers to send), and so will every part of a group
  // it belongs to from now on.
  std::vector<CollectiveResult> WorkerLeft(int32_t worker);
  // Worker `worker` was lost and the job goes on without it: every part
  // that waited only for it completes over the members present (the
  // answers to send), and so will the parts of its groups from now on.
  std::vector<CollectiveResult> WorkerLost(int32_t worker);

  size_t bytes_held() const { return bytes_held_; }
  size_t parts_waiting() const { return parts_.size(); }

 private:
  using Key = std::tuple<uint32_t, uint64_t, uint64_t>;
  struct Part {
    CollectiveContribution first;         // its fields (data not kept)
    std::vector<transport::Frame> data;   // by rank
    std::vector<transport::PeerId> from;  // by rank ("" : not yet)
    int32_t arrived = 0;
    std::string error;  // set: the part failed; it stays until every contributor heard
  };
  // Over the members present, in rank order (`absent` of them are not).
  transport::Frame Reduce(const Part& part, size_t absent) const;
  transport::WritableFrame NewResult(size_t size) const;
  // The answer of a part every member sent, or is absent from; removes it.
  CollectiveResult Finish(std::map<Key, Part>::iterator it);
  void DropOrphansBefore(uint32_t group, uint64_t seq);
  std::vector<int32_t> Absent(const Part& part) const;
  bool Ready(const Part& part) const;
  // The contributors heard so far, in rank order.
  static std::vector<transport::PeerId> Heard(const Part& part);
  // Lets go of the part's data (bytes_held_ counts it no more).
  void DropData(Part& part);

  // The group rank of job worker `worker` in `c`'s group, or -1.
  static int32_t RankOf(const CollectiveContribution& c, int32_t worker);
  static bool IsMember(const CollectiveContribution& c, int32_t worker);

  size_t byte_cap_;
  FrameMaker make_frame_;
  size_t bytes_held_ = 0;
  std::set<int32_t> departed_;  // finished (or lost where the job ends)
  std::set<int32_t> lost_;      // lost, the job going on without them
  std::map<Key, Part> parts_;
};

}  // namespace een
