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

bool WorkerClient::CopyIsLive(const CollectivePart& part, size_t k) const {
  const size_t p = part.ps[k];
  return p < ps_.size() && part.generation[k] != 0 && part.generation[k] == ps_generation_[p];
}

Result<bool> WorkerClient::CollectiveTake(CollectiveCall& c) {
  if (collective_replies_.size() != ps_.size()) collective_replies_.resize(ps_.size());
  if (c.answered.size() != c.parts.size()) c.answered.assign(c.parts.size(), false);
  const worker_messages::ReduceFields& call = c.call;
  // Answers to any call's parts are set aside by (group, seq, offset), per
  // PS, until their call takes them; the first copy's answer counts.
  for (size_t i = 0; i < c.parts.size(); ++i) {
    if (c.answered[i]) continue;
    const CollectivePart& part = c.parts[i];
    for (size_t p : part.ps) {
      auto& stash = collective_replies_[p];
      auto found = stash.find(CollectiveKey{call.group, call.seq, part.offset});
      if (found == stash.end()) continue;
      const Message m = std::move(found->second);
      stash.erase(found);
      c.answered[i] = true;
      EEN_RETURN_IF_ERROR(wire::Visit(m, [&](wire::Header::Reader h) -> Status {
        auto reply = h.getReduceReply();
        if (reply.hasError() && reply.getError().size() > 0) {
          return FailedPrecondition(fmt::format("PS {}: {}", p, reply.getError().cStr()));
        }
        if (m.payload_count() != 1) {
          return Internal(fmt::format("PS {} answered a collective without its result", p));
        }
        for (int32_t r : reply.getAbsent()) {
          if (r < 0 || r >= call.contributors) {
            return Internal(fmt::format("PS {} named rank {} absent from a group of {}", p, r,
                                        call.contributors));
          }
          if (std::find(c.absent.begin(), c.absent.end(), r) == c.absent.end()) {
            c.absent.push_back(r);
          }
        }
        return c.take(part, m.payload(0));
      }));
      break;
    }
    bool reachable = c.answered[i];
    for (size_t k = 0; k < part.ps.size() && !reachable; ++k) reachable = CopyIsLive(part, k);
    if (!reachable) {  // every copy it was sent to is gone (a PS replaced since never got it)
      std::string held;
      for (size_t p : part.ps) held += (held.empty() ? "PS " : " and PS ") + std::to_string(p);
      return Unavailable(fmt::format(
          "collective call {} of group {}: {} held its elements [{}, +{}) and {} lost{}", call.seq,
          call.group, held, part.offset, part.numel, part.ps.size() > 1 ? "were both" : "was",
          part.ps.size() > 1 ? ""
                             : " (with --replicas 2 every part has a second copy, and a PS's "
                               "loss changes nothing)"));
    }
  }
  if (std::find(c.answered.begin(), c.answered.end(), false) != c.answered.end()) return false;
  // A group's calls complete in order: answers to this one or earlier ones
  // that other copies sent are dropped, now and when they come.
  collective_done_[call.group] = call.seq;
  for (auto& stash : collective_replies_) {
    for (auto it = stash.lower_bound(CollectiveKey{call.group, 0, 0});
         it != stash.end() && std::get<0>(it->first) == call.group &&
         std::get<1>(it->first) <= call.seq;) {
      it = stash.erase(it);
    }
  }
  return true;
}

Status WorkerClient::CollectiveReceive(const std::vector<CollectiveCall*>& calls,
                                       milliseconds slice) {
  EEN_RETURN_IF_ERROR(JobStatus());
  if (NeedsRecovery()) EEN_RETURN_IF_ERROR(Recover().status());
  if (collective_replies_.size() != ps_.size()) collective_replies_.resize(ps_.size());
  // Listen to every copy of a part still waiting that is the process it was
  // sent to; say which calls wait long.
  const auto now = Clock::now();
  std::set<size_t> listen;
  for (CollectiveCall* c : calls) {
    if (c->since == Clock::time_point{}) {
      c->since = now;
      c->next_warning = now + std::chrono::seconds(30);
    } else if (now > c->next_warning) {
      spdlog::warn("still waiting for collective call {} of group {} after {} s", c->call.seq,
                   c->call.group,
                   std::chrono::duration_cast<std::chrono::seconds>(now - c->since).count());
      c->next_warning += std::chrono::seconds(30);
    }
    for (size_t i = 0; i < c->parts.size(); ++i) {
      if (i < c->answered.size() && c->answered[i]) continue;
      const CollectivePart& part = c->parts[i];
      for (size_t k = 0; k < part.ps.size(); ++k) {
        if (CopyIsLive(part, k)) listen.insert(part.ps[k]);
      }
    }
  }
  auto set_aside = [&](size_t p, const Message& m) -> Status {
    constexpr size_t kMaxStashed = 1 << 16;  // answers to calls this worker sent: a few
    return wire::Visit(m, [&](wire::Header::Reader h) -> Status {
      if (h.isReduceReply()) {
        auto reply = h.getReduceReply();
        auto done = collective_done_.find(reply.getGroup());
        if (done != collective_done_.end() && reply.getSeq() <= done->second) {
          return Status::Ok();  // another copy's answer to a call already completed
        }
        auto& stash = collective_replies_[p];
        if (stash.size() >= kMaxStashed) {
          return Internal(
              fmt::format("PS {} sent {} collective answers nobody waits for", p, stash.size()));
        }
        stash[CollectiveKey{reply.getGroup(), reply.getSeq(), reply.getOffset()}] = m;
        return Status::Ok();
      }
      if (h.isError()) return PsError(p, h.getError());
      deferred_[p].push_back(m);  // a pull answer: for Pull()
      return Status::Ok();
    });
  };
  const milliseconds each(listen.size() <= 1 ? slice.count() : 2);
  for (size_t p : listen) {
    auto reply = ps_[p]->Receive(each);
    if (!reply.ok() && reply.status().code() == StatusCode::kPermissionDenied) {
      return reply.status();
    }
    if (reply.ok()) EEN_RETURN_IF_ERROR(set_aside(p, *reply));
  }
  return Status::Ok();
}

}  // namespace een
