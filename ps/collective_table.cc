#include "ps/collective_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/wire_dtype.h"

namespace een {
namespace {

constexpr int32_t kMaxContributors = 65536;
// Parts waiting at once (each holds a record even when empty).
constexpr size_t kMaxParts = 1 << 20;

template <typename T>
T Combine(wire::ReduceOp op, T a, T b) {
  switch (op) {
    case wire::ReduceOp::SUM:
      return static_cast<T>(a + b);
    case wire::ReduceOp::PRODUCT:
      return static_cast<T>(a * b);
    case wire::ReduceOp::MIN:
      return std::min(a, b);
    case wire::ReduceOp::MAX:
      return std::max(a, b);
    default:
      return a;
  }
}

// Integers wrap (as torch's do): the arithmetic runs unsigned.
template <typename T, typename U>
void ReduceIntegers(wire::ReduceOp op, std::byte* out, const std::byte* acc, const std::byte* in,
                    size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, in + i * sizeof(T), sizeof(T));
    T r;
    if (op == wire::ReduceOp::SUM) {
      r = static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else if (op == wire::ReduceOp::PRODUCT) {
      r = static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      r = Combine(op, a, b);
    }
    std::memcpy(out + i * sizeof(T), &r, sizeof(T));
  }
}

template <typename T>
void ReduceFloats(wire::ReduceOp op, std::byte* out, const std::byte* acc, const std::byte* in,
                  size_t n) {
  T* o = reinterpret_cast<T*>(out);
  const T* a = reinterpret_cast<const T*>(acc);
  const T* b = reinterpret_cast<const T*>(in);
  switch (op) {  // one loop per op, so each vectorises
    case wire::ReduceOp::SUM:
      for (size_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
      return;
    case wire::ReduceOp::PRODUCT:
      for (size_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
      return;
    case wire::ReduceOp::MIN:
    case wire::ReduceOp::MAX:
      for (size_t i = 0; i < n; ++i) {  // NaN wins min and max, as in torch
        o[i] = a[i] != a[i] ? a[i] : b[i] != b[i] ? b[i] : Combine(op, a[i], b[i]);
      }
      return;
    default:
      for (size_t i = 0; i < n; ++i) o[i] = a[i];
      return;
  }
}

// f16/bf16: widened to float, combined, rounded back (as torch's Half and
// BFloat16 arithmetic).
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ReduceHalves(wire::ReduceOp op, std::byte* out, const std::byte* acc, const std::byte* in,
                  size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t a, b;
    std::memcpy(&a, acc + 2 * i, 2);
    std::memcpy(&b, in + 2 * i, 2);
    float fa = ToFloat(a), fb = ToFloat(b), r;
    if ((op == wire::ReduceOp::MIN || op == wire::ReduceOp::MAX) && (fa != fa || fb != fb)) {
      r = fa != fa ? fa : fb;
    } else {
      r = Combine(op, fa, fb);
    }
    const uint16_t h = FromFloat(r);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

// out = acc op in, element by element (`out` may be `acc`).
void CombineInto(wire::ElementType t, wire::ReduceOp op, std::byte* out, const std::byte* acc,
                 const std::byte* in, size_t n) {
  switch (t) {
    case wire::ElementType::F32:
      return ReduceFloats<float>(op, out, acc, in, n);
    case wire::ElementType::F64:
      return ReduceFloats<double>(op, out, acc, in, n);
    case wire::ElementType::F16:
      return ReduceHalves<F16ToFloat, FloatToF16>(op, out, acc, in, n);
    case wire::ElementType::BF16:
      return ReduceHalves<Bf16ToFloat, FloatToBf16>(op, out, acc, in, n);
    case wire::ElementType::I32:
      return ReduceIntegers<int32_t, uint32_t>(op, out, acc, in, n);
    case wire::ElementType::I64:
      return ReduceIntegers<int64_t, uint64_t>(op, out, acc, in, n);
    case wire::ElementType::U8:
      return ReduceIntegers<uint8_t, uint32_t>(op, out, acc, in, n);
    case wire::ElementType::I8:
      return ReduceIntegers<int8_t, uint32_t>(op, out, acc, in, n);
  }
}

// A float sum over the members present, scaled to the whole group's
// (integers stay as summed: a count is not estimated).
void ScaleFloats(wire::ElementType t, std::byte* acc, size_t n, double factor) {
  auto halves = [&](float (*to)(uint16_t), uint16_t (*from)(float)) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, acc + 2 * i, 2);
      h = from(static_cast<float>(to(h) * factor));
      std::memcpy(acc + 2 * i, &h, 2);
    }
  };
  switch (t) {
    case wire::ElementType::F32: {
      float* a = reinterpret_cast<float*>(acc);
      for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(a[i] * factor);
      return;
    }
    case wire::ElementType::F64: {
      double* a = reinterpret_cast<double*>(acc);
      for (size_t i = 0; i < n; ++i) a[i] *= factor;
      return;
    }
    case wire::ElementType::F16:
      return halves(F16ToFloat, FloatToF16);
    case wire::ElementType::BF16:
      return halves(Bf16ToFloat, FloatToBf16);
    default:
      return;
  }
}

// What every contributor must agree on; "" when `c` does.
std::string Disagreement(const CollectiveContribution& first, const CollectiveContribution& c) {
  static const char* const kOps[] = {"sum (all_reduce)",    "product",  "min", "max",
                                     "gather (all_gather)", "broadcast"};
  static const char* const kTypes[] = {"float32", "float64", "float16", "bfloat16",
                                       "int32",   "int64",   "uint8",   "int8"};
  if (c.op != first.op) {
    return fmt::format(
        "rank {} called {} and rank {} {} (the members called different collectives)", first.rank,
        kOps[static_cast<int>(first.op)], c.rank, kOps[static_cast<int>(c.op)]);
  }
  if (c.dtype != first.dtype) {
    return fmt::format("rank {} sent {} and rank {} {}", first.rank,
                       kTypes[static_cast<int>(first.dtype)], c.rank,
                       kTypes[static_cast<int>(c.dtype)]);
  }
  if (c.numel != first.numel || c.total != first.total)
    return fmt::format("rank {} sent a tensor of {} elements and rank {} one of {}", first.rank,
                       first.total, c.rank, c.total);
  if (c.contributors != first.contributors)
    return fmt::format("the members count different group sizes ({} and {})", first.contributors,
                       c.contributors);
  if (c.op == wire::ReduceOp::BROADCAST && c.root != first.root)
    return fmt::format("the members name different roots ({} and {})", first.root, c.root);
  return "";
}

}  // namespace

size_t CollectiveBytesCap() {
  const char* text = std::getenv("EEN_COLLECTIVE_BYTES");
  if (text && *text) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (*end == '\0' && v > 0) return static_cast<size_t>(v);
  }
  return size_t{4} << 30;
}

Result<std::optional<CollectiveResult>> CollectiveTable::Add(const CollectiveContribution& c) {
  const size_t element = wire::ElementBytes(c.dtype);
  if (element == 0) return InvalidArgument("collective: an element type this PS does not know");
  if (c.op > wire::ReduceOp::BROADCAST) return InvalidArgument("collective: an unknown op");
  if (c.contributors < 1 || c.contributors > kMaxContributors) {
    return InvalidArgument(
        fmt::format("collective: {} contributors (1 to {})", c.contributors, kMaxContributors));
  }
  if (c.rank < 0 || c.rank >= c.contributors) {
    return InvalidArgument(
        fmt::format("collective: rank {} of a group of {}", c.rank, c.contributors));
  }
  if (c.op == wire::ReduceOp::BROADCAST && (c.root < 0 || c.root >= c.contributors)) {
    return InvalidArgument(
        fmt::format("collective: broadcast from root {} of a group of {}", c.root, c.contributors));
  }
  if (!c.members.empty()) {
    if (c.members.size() != static_cast<size_t>(c.contributors)) {
      return InvalidArgument(fmt::format("collective: {} members listed for a group of {}",
                                         c.members.size(), c.contributors));
    }
    for (int32_t m : c.members) {
      if (m < 0 || m >= kMaxContributors) {
        return InvalidArgument(fmt::format("collective: member worker {}", m));
      }
    }
  }
  if (c.numel > c.total || c.offset > c.total - c.numel) {
    return InvalidArgument(fmt::format("collective: part [{}, +{}) beyond the tensor's {} elements",
                                       c.offset, c.numel, c.total));
  }
  if (c.numel > std::numeric_limits<size_t>::max() / element / kMaxContributors) {
    return InvalidArgument(fmt::format("collective: a part of {} elements", c.numel));
  }
  const size_t part_bytes = c.numel * element;
  const bool sends = c.op != wire::ReduceOp::BROADCAST || c.rank == c.root;
  if (c.bytes != (sends ? part_bytes : 0)) {
    return InvalidArgument(fmt::format("collective: {} bytes for {} elements of {} bytes{}",
                                       c.bytes, c.numel, element,
                                       sends ? "" : " (a broadcast's non-root sends none)"));
  }
  const int32_t sender = c.members.empty() ? c.rank : c.members[c.rank];
  if (lost_.count(sender) > 0) {
    return std::optional<CollectiveResult>(CollectiveResult{
        c.group,
        c.seq,
        c.offset,
        {c.from},
        {},
        fmt::format("worker {} was declared lost and the job went on without it", sender),
        {}});
  }
  const Key key{c.group, c.seq, c.offset};
  auto it = parts_.find(key);
  if (it == parts_.end()) {
    if (parts_.size() >= kMaxParts) {
      return ResourceExhausted(fmt::format(
          "collective: {} parts already wait on this PS for their other members", kMaxParts));
    }
    Part fresh;
    fresh.first = c;
    fresh.first.data = nullptr;
    fresh.data.resize(c.contributors);
    fresh.from.resize(c.contributors);
    it = parts_.emplace(key, std::move(fresh)).first;
  }
  Part& part = it->second;
  if (c.rank < static_cast<int32_t>(part.from.size()) && !part.from[c.rank].empty()) {
    return InvalidArgument(
        fmt::format("collective: rank {} sent part {} of call {} twice", c.rank, c.offset, c.seq));
  }
  CollectiveResult answer{c.group, c.seq, c.offset, {}, {}, {}, {}};
  if (part.error.empty()) {
    std::string why = Disagreement(part.first, c);
    for (int32_t w : departed_) {
      if (why.empty() && IsMember(c, w)) {
        why =
            fmt::format("worker {} left the job (it finished or was lost) and cannot take part", w);
      }
    }
    const size_t result_bytes =
        c.op == wire::ReduceOp::GATHER ? part_bytes * static_cast<size_t>(c.contributors) : 0;
    if (!why.empty()) {
      part.error = why;  // the worker names the call
    } else if (bytes_held_ + c.bytes + result_bytes > byte_cap_) {
      part.error = fmt::format(
          "this PS holds {} bytes of collectives in flight; {} more would pass its cap of {} "
          "(EEN_COLLECTIVE_BYTES)",
          bytes_held_, c.bytes + result_bytes, byte_cap_);
    }
    if (!part.error.empty()) {
      // Everyone heard so far, and this one, learn why; later ones as they come.
      DropData(part);
      answer.to = Heard(part);
    }
  }
  if (c.rank < static_cast<int32_t>(part.from.size())) part.from[c.rank] = c.from;
  ++part.arrived;
  if (!part.error.empty()) {
    answer.to.push_back(c.from);
    answer.error = part.error;
    if (Ready(part)) parts_.erase(it);
    return std::optional<CollectiveResult>(std::move(answer));
  }
  part.data[c.rank] = c.frame.data() == c.data && c.frame.size() == c.bytes
                          ? c.frame
                          : transport::Frame::Copy(c.data, c.bytes);
  bytes_held_ += c.bytes;
  if (!Ready(part)) return std::optional<CollectiveResult>();
  return std::optional<CollectiveResult>(Finish(it));
}

int32_t CollectiveTable::RankOf(const CollectiveContribution& c, int32_t worker) {
  if (c.members.empty()) return worker >= 0 && worker < c.contributors ? worker : -1;
  auto at = std::find(c.members.begin(), c.members.end(), worker);
  return at == c.members.end() ? -1 : static_cast<int32_t>(at - c.members.begin());
}

std::vector<int32_t> CollectiveTable::Absent(const Part& part) const {
  std::vector<int32_t> absent;
  for (int32_t r = 0; r < static_cast<int32_t>(part.from.size()); ++r) {
    const int32_t worker = part.first.members.empty() ? r : part.first.members[r];
    if (part.from[r].empty() && lost_.count(worker) > 0) absent.push_back(r);
  }
  return absent;
}

bool CollectiveTable::Ready(const Part& part) const {
  if (lost_.empty()) return part.arrived >= part.first.contributors;  // each contribution asks
  return part.arrived + static_cast<int32_t>(Absent(part).size()) >= part.first.contributors;
}

std::vector<transport::PeerId> CollectiveTable::Heard(const Part& part) {
  std::vector<transport::PeerId> heard;
  for (const auto& from : part.from) {
    if (!from.empty()) heard.push_back(from);
  }
  return heard;
}

void CollectiveTable::DropData(Part& part) {
  for (auto& d : part.data) {
    bytes_held_ -= d.size();
    d = transport::Frame();
  }
}

CollectiveResult CollectiveTable::Finish(std::map<Key, Part>::iterator it) {
  Part& part = it->second;
  const CollectiveContribution& f = part.first;
  CollectiveResult answer{f.group, f.seq, f.offset, Heard(part), {}, {}, Absent(part)};
  const bool root_absent = f.op == wire::ReduceOp::BROADCAST && part.from[f.root].empty();
  if (root_absent || (f.op == wire::ReduceOp::GATHER && !answer.absent.empty())) {
    const int32_t rank = root_absent ? f.root : answer.absent[0];
    answer.error = fmt::format(
        "worker {} was lost before sending its part{}", f.members.empty() ? rank : f.members[rank],
        root_absent ? " (the broadcast's root)" : " of the all_gather: it has no value");
  } else {
    answer.result = Reduce(part, answer.absent.size());
  }
  DropData(part);
  const uint32_t group = f.group;
  const uint64_t seq = f.seq;
  parts_.erase(it);
  DropOrphansBefore(group, seq);
  return answer;
}

void CollectiveTable::DropOrphansBefore(uint32_t group, uint64_t seq) {
  // Each member sends a group's calls in order, on one connection per PS:
  // once a call completed here, an earlier one still waiting never will
  // (its other parts went to a PS that was lost, or to its predecessor).
  for (auto it = parts_.lower_bound(Key{group, 0, 0});
       it != parts_.end() && std::get<0>(it->first) == group && std::get<1>(it->first) < seq;) {
    if (!it->second.error.empty()) {
      ++it;
      continue;
    }
    DropData(it->second);
    it = parts_.erase(it);
  }
}

bool CollectiveTable::IsMember(const CollectiveContribution& c, int32_t worker) {
  return RankOf(c, worker) >= 0;
}

std::vector<CollectiveResult> CollectiveTable::WorkerLeft(int32_t worker) {
  if (lost_.count(worker) > 0) return {};  // the others go on without it
  departed_.insert(worker);
  std::vector<CollectiveResult> answers;
  for (auto it = parts_.begin(); it != parts_.end(); ++it) {
    Part& part = it->second;
    const int32_t rank = RankOf(part.first, worker);
    if (!part.error.empty() || rank < 0) continue;
    if (!part.from[rank].empty()) continue;  // it sent its part: the others may still come
    part.error = fmt::format(
        "worker {} left the job (it finished or was lost) before sending its part", worker);
    DropData(part);
    answers.push_back(CollectiveResult{std::get<0>(it->first),
                                       std::get<1>(it->first),
                                       std::get<2>(it->first),
                                       Heard(part),
                                       {},
                                       part.error,
                                       {}});
  }
  return answers;
}

std::vector<CollectiveResult> CollectiveTable::WorkerLost(int32_t worker) {
  if (!lost_.insert(worker).second) return {};
  std::vector<CollectiveResult> answers;
  for (auto it = parts_.begin(); it != parts_.end();) {
    Part& part = it->second;
    if (!part.error.empty() || !IsMember(part.first, worker) || !Ready(part)) {
      ++it;
      continue;
    }
    const Key next{std::get<0>(it->first), std::get<1>(it->first), std::get<2>(it->first) + 1};
    answers.push_back(Finish(it));
    it = parts_.lower_bound(next);  // Finish may drop earlier parts of its group
  }
  return answers;
}

transport::Frame CollectiveTable::Reduce(const Part& part, size_t absent) const {
  const CollectiveContribution& f = part.first;
  if (f.op == wire::ReduceOp::BROADCAST) return part.data[f.root];
  if (f.op == wire::ReduceOp::GATHER) {
    size_t size = 0;
    for (const auto& d : part.data) size += d.size();
    transport::WritableFrame out = NewResult(size);
    std::byte* at = out.data;
    for (const auto& d : part.data) {
      if (d.size() > 0) std::memcpy(at, d.data(), d.size());
      at += d.size();
    }
    return out.frame;
  }
  const size_t size = f.numel * wire::ElementBytes(f.dtype);
  transport::WritableFrame out = NewResult(size);
  const std::byte* acc = nullptr;  // in rank order, over the members present
  for (size_t r = 0; r < part.data.size(); ++r) {
    if (part.from[r].empty()) continue;
    if (acc) {
      CombineInto(f.dtype, f.op, out.data, acc, part.data[r].data(), f.numel);
      acc = out.data;
    } else {
      acc = part.data[r].data();
    }
  }
  if (acc != out.data && size > 0) std::memcpy(out.data, acc, size);  // one member present
  if (absent > 0 && f.op == wire::ReduceOp::SUM) {
    const size_t present = part.data.size() - absent;
    ScaleFloats(f.dtype, out.data, f.numel,
                static_cast<double>(part.data.size()) / static_cast<double>(present));
  }
  return out.frame;
}

transport::WritableFrame CollectiveTable::NewResult(size_t size) const {
  if (make_frame_) {
    Result<transport::WritableFrame> made = make_frame_(size);
    if (made.ok()) return *std::move(made);  // else heap memory: sending it says what failed
  }
  return transport::NewHeapFrame(size);
}

}  // namespace een
