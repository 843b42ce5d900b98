// WorkerClient's side of the een backend's collectives: each part sent to
// its copies, the first answer taken (see worker_client.h).
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "common/logging.h"
#include "common/wire.h"
#include "worker/worker_client.h"
#include "worker/worker_messages.h"

namespace een {

using std::chrono::milliseconds;
using transport::Message;
using Clock = std::chrono::steady_clock;

std::vector<size_t> WorkerClient::collective_ps(size_t p) const {
  if (!map_.replicated() || ps_.size() < 2) return {p};
  return {p, (p + 1) % ps_.size()};
}

Status WorkerClient::CollectiveSend(const worker_messages::ReduceFields& call,
                                    std::vector<CollectivePart>& parts) {
  EEN_RETURN_IF_ERROR(JobStatus());
  for (CollectivePart& part : parts) {
    worker_messages::ReduceFields fields = call;
    fields.offset = part.offset;
    fields.numel = part.numel;
    part.generation.clear();
    for (size_t p : part.ps) {
      if (p >= ps_.size()) return Internal(fmt::format("collective part for PS {}", p));
      part.generation.push_back(ps_generation_[p]);
      Status sent =
          Send(p, worker_messages::Reduce(fields, part.data, part.bytes, part.owner),
               fmt::format("collective call {} of group {} to PS {}", call.seq, call.group, p));
      if (!sent.ok() && part.ps.size() == 1) return sent;
      if (!sent.ok()) {
        part.generation.back() = 0;  // never reached it: the other copy answers
        spdlog::warn("{} (its other copy answers)", sent.message());
      }
    }
  }
  return Status::Ok();
}

Status WorkerClient::CollectiveWait(
    const worker_messages::ReduceFields& call, const std::vector<CollectivePart>& parts,
    const std::function<Status(const CollectivePart&, const transport::Frame&,
                               const std::vector<int32_t>& absent)>& take) {
  using Key = std::tuple<uint32_t, uint64_t, uint64_t>;
  if (collective_replies_.size() != ps_.size()) collective_replies_.resize(ps_.size());
  std::vector<bool> answered(parts.size(), false);
  size_t left = parts.size();
  const std::string what = fmt::format("collective call {} of group {}", call.seq, call.group);

  // Answers to any call's parts are set aside by (group, seq, offset), per
  // PS, until their call waits for them; the first copy's answer counts.
  auto use_stashed = [&]() -> Status {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (answered[i]) continue;
      for (size_t p : parts[i].ps) {
        auto& stash = collective_replies_[p];
        auto found = stash.find(Key{call.group, call.seq, parts[i].offset});
        if (found == stash.end()) continue;
        const Message m = std::move(found->second);
        stash.erase(found);
        answered[i] = true;
        --left;
        EEN_RETURN_IF_ERROR(wire::Visit(m, [&](wire::Header::Reader h) -> Status {
          auto reply = h.getReduceReply();
          if (reply.hasError() && reply.getError().size() > 0) {
            return FailedPrecondition(fmt::format("PS {}: {}", p, reply.getError().cStr()));
          }
          if (m.payload_count() != 1) {
            return Internal(fmt::format("PS {} answered a collective without its result", p));
          }
          std::vector<int32_t> absent;
          for (int32_t r : reply.getAbsent()) {
            if (r < 0 || r >= call.contributors) {
              return Internal(fmt::format("PS {} named rank {} absent from a group of {}", p, r,
                                          call.contributors));
            }
            absent.push_back(r);
          }
          return take(parts[i], m.payload(0), absent);
        }));
        break;
      }
    }
    return Status::Ok();
  };
  auto take_reply = [&](size_t p, const Message& m) -> Status {
    constexpr size_t kMaxStashed = 1 << 16;  // answers to calls this worker sent: a few
    EEN_RETURN_IF_ERROR(wire::Visit(m, [&](wire::Header::Reader h) -> Status {
      if (h.isReduceReply()) {
        auto reply = h.getReduceReply();
        auto done = collective_done_.find(reply.getGroup());
        if (done != collective_done_.end() && reply.getSeq() <= done->second) {
          return Status::Ok();  // another copy's answer to a call already waited for
        }
        auto& stash = collective_replies_[p];
        if (stash.size() >= kMaxStashed) {
          return Internal(
              fmt::format("PS {} sent {} collective answers nobody waits for", p, stash.size()));
        }
        stash[Key{reply.getGroup(), reply.getSeq(), reply.getOffset()}] = m;
        return Status::Ok();
      }
      if (h.isError()) return PsError(p, h.getError());
      deferred_[p].push_back(m);  // a pull answer: for Pull()
      return Status::Ok();
    }));
    return use_stashed();
  };

  EEN_RETURN_IF_ERROR(use_stashed());
  const auto waiting_since = Clock::now();
  auto next_warning = waiting_since + std::chrono::seconds(30);
  while (left > 0) {
    EEN_RETURN_IF_ERROR(JobStatus());
    if (NeedsRecovery()) {
      EEN_RETURN_IF_ERROR(Recover().status());
      if (collective_replies_.size() < ps_.size()) collective_replies_.resize(ps_.size());
    }
    // Listen to every copy of a part still waiting that is the process it
    // was sent to (a PS replaced since never got it).
    std::set<size_t> listen;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (answered[i]) continue;
      bool reachable = false;
      for (size_t k = 0; k < parts[i].ps.size(); ++k) {
        const size_t p = parts[i].ps[k];
        if (p < ps_.size() && parts[i].generation[k] != 0 &&
            parts[i].generation[k] == ps_generation_[p]) {
          listen.insert(p);
          reachable = true;
        }
      }
      if (!reachable) {
        std::string held;
        for (size_t p : parts[i].ps)
          held += (held.empty() ? "PS " : " and PS ") + std::to_string(p);
        return Unavailable(fmt::format(
            "{}: {} held its elements [{}, +{}) and {} lost{}", what, held, parts[i].offset,
            parts[i].numel, parts[i].ps.size() > 1 ? "were both" : "was",
            parts[i].ps.size() > 1
                ? ""
                : " (with --replicas 2 every part has a second copy, and a PS's loss changes "
                  "nothing)"));
      }
    }
    if (Clock::now() > next_warning) {
      spdlog::warn(
          "still waiting for {} after {} s", what,
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - waiting_since).count());
      next_warning += std::chrono::seconds(30);
    }
    const milliseconds slice(listen.size() == 1 ? 50 : 2);
    for (size_t p : listen) {
      auto reply = ps_[p]->Receive(slice);
      if (!reply.ok() && reply.status().code() == StatusCode::kPermissionDenied) {
        return reply.status();
      }
      if (reply.ok()) EEN_RETURN_IF_ERROR(take_reply(p, *reply));
      if (left == 0) break;
    }
  }
  // Calls are waited for in order: answers to this one or earlier ones that
  // other copies sent are dropped, now and when they come.
  collective_done_[call.group] = call.seq;
  for (auto& stash : collective_replies_) {
    for (auto it = stash.lower_bound(Key{call.group, 0, 0}); it != stash.end() &&
                                                             std::get<0>(it->first) == call.group &&
                                                             std::get<1>(it->first) <= call.seq;) {
      it = stash.erase(it);
    }
  }
  return Status::Ok();
}

}  // namespace een
