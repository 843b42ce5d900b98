// een::ProcessGroup: see een/process_group.h.
#include "een/process_group.h"

#include <ATen/core/ivalue.h>
#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "common/transport/auth.h"
#include "een/error.h"
#include "worker/public_error.h"
#include "worker/worker_client.h"

namespace een {
namespace {

// Below this many bytes a tensor goes whole to one PS.
constexpr size_t kSplitBytes = 64 * 1024;

[[noreturn]] void Fail(const std::string& what, Error::Code code = Error::Code::kInvalidArgument) {
  throw Error("een backend: " + what, code);
}

void ThrowIfError(const Status& s, const std::string& where) {
  if (!s.ok()) Fail(where + ": " + s.message(), PublicCode(s.code()));
}

wire::ElementType ElementTypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return wire::ElementType::F32;
    case at::kDouble:
      return wire::ElementType::F64;
    case at::kHalf:
      return wire::ElementType::F16;
    case at::kBFloat16:
      return wire::ElementType::BF16;
    case at::kInt:
      return wire::ElementType::I32;
    case at::kLong:
      return wire::ElementType::I64;
    case at::kByte:
      return wire::ElementType::U8;
    case at::kChar:
      return wire::ElementType::I8;
    default:
      Fail(
          fmt::format("tensors of {} are not supported (float32, float64, float16, bfloat16, "
                      "int32, int64, uint8, int8 are)",
                      c10::toString(t.scalar_type())));
  }
}

wire::ReduceOp WireOp(const c10d::ReduceOp& op, const at::Tensor& t) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return wire::ReduceOp::SUM;
    case c10d::ReduceOp::AVG:
      if (!at::isFloatingType(t.scalar_type())) {
        Fail("ReduceOp.AVG needs a floating-point tensor (use SUM and divide)");
      }
      return wire::ReduceOp::SUM;  // then divided by the group's size
    case c10d::ReduceOp::PRODUCT:
      return wire::ReduceOp::PRODUCT;
    case c10d::ReduceOp::MIN:
      return wire::ReduceOp::MIN;
    case c10d::ReduceOp::MAX:
      return wire::ReduceOp::MAX;
    default:
      Fail(
          "only SUM, AVG, PRODUCT, MIN and MAX are supported (not BAND, BOR, BXOR or "
          "PREMUL_SUM)");
  }
}

// The tensor's elements in host memory, contiguous: itself when it is, else
// a copy (written back by Finish()).
struct Host {
  at::Tensor original, host;
  explicit Host(const at::Tensor& t)
      : original(t), host(t.is_cpu() && t.is_contiguous() ? t : t.to(at::kCPU).contiguous()) {}
  void Finish() {
    if (!host.is_same(original)) original.copy_(host);
  }
};

class CallWork : public c10d::Work {
 public:
  CallWork(c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(-1, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}
  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->exception_ptr(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void Complete() { future_->markCompleted(c10::IValue(outputs_)); }
  void Fail(std::exception_ptr e) { future_->setError(std::move(e)); }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

// The group ranks absent from a group's latest result (lost members the
// job went on without, --min-workers), set by the calls' thread.
class AbsentRanks {
 public:
  void Set(std::vector<int32_t> ranks) {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_ = std::move(ranks);
  }
  std::vector<int32_t> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ranks_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<int32_t> ranks_;
};

// What a started call leaves to do: wait for `call`'s answers (none when
// it sends nothing), then `done` (copies results out; may throw).
struct CallFinish {
  std::shared_ptr<WorkerClient::CollectiveCall> call;
  std::function<void()> done;
};

// The process's membership of the job (one WorkerClient) and the thread
// that runs every group's calls: started in issue order, each group's
// completed in its order.
class CollectiveSession {
 public:
  static std::shared_ptr<CollectiveSession> Get() {
    static std::mutex mu;
    static std::weak_ptr<CollectiveSession> current;
    static bool left = false;
    std::lock_guard<std::mutex> lock(mu);
    if (auto s = current.lock()) return s;
    if (left) {
      Fail(
          "this process already left the job (its last process group was destroyed); a "
          "worker joins once",
          Error::Code::kFailedPrecondition);
    }
    auto s = std::shared_ptr<CollectiveSession>(new CollectiveSession());
    current = s;
    left = true;  // from now on: once this session ends, the process is out
    return s;
  }

  ~CollectiveSession() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // Still a member until the process ends: its exit status then tells
    // een-launch whether it finished (0) or failed. (Python destroys the
    // group on the way out of an exception too: saying "done" here would
    // hide that failure.) Its heartbeats go on meanwhile.
    (void)client_.release();
  }

  WorkerClient& client() { return *client_; }

  // A job-wide number for a group of these members (the same on each).
  uint32_t GroupId(const std::vector<int>& members) {
    std::lock_guard<std::mutex> lock(mu_);
    const int occurrence = occurrences_[members]++;
    uint32_t h = 2166136261u;  // FNV-1a
    auto mix = [&](uint32_t v) {
      for (int i = 0; i < 4; ++i) {
        h ^= (v >> (8 * i)) & 0xFF;
        h *= 16777619u;
      }
    };
    for (int m : members) mix(static_cast<uint32_t>(m));
    mix(static_cast<uint32_t>(occurrence));
    return h;
  }

  // A call in two halves: `start` (sends its parts) returns its CallFinish.
  // The session's thread starts every call as soon as it is queued, and
  // completes each group's calls in order as their answers come, completing
  // or failing `work`: a group never waits for another's (as with gloo,
  // whose groups have a thread each).
  using Start = std::function<CallFinish(uint64_t seq)>;
  // Queues `start` of group `group` after every call posted before, with
  // the next number of `*counter` (taken under the same lock, so a group's
  // calls go in the order of their numbers).
  void Post(uint32_t group, uint64_t* counter, c10::intrusive_ptr<CallWork> work, Start start) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t seq = (*counter)++;
      tasks_.push_back(
          {group, std::move(work), [start = std::move(start), seq] { return start(seq); }});
    }
    cv_.notify_one();
  }
  std::mutex& queue_mutex() { return mu_; }

 private:
  CollectiveSession() {
    auto env = JobEnvironment::FromProcess("this program");
    if (!env.ok() && std::getenv("EEN_RANK") != nullptr) {
      ThrowIfError(env.status(), "cannot join the job");  // under een-launch: the cause as is
    }
    if (!env.ok()) {
      // (EEN_LOCAL=1, which the message may suggest, is een.DataParallel's.)
      ThrowIfError(env.status(),
                   "cannot join a job (the een backend has no one-process mode: run the script "
                   "under een-launch, e.g. `een-launch --ps 1 --workers 1 -- python3 train.py`)");
    }
    if (spdlog::get("een:worker " + std::to_string(env->rank)) == nullptr) {
      ThrowIfError(InitLogging("worker " + std::to_string(env->rank)), "cannot join a job");
    }
    ThrowIfError(AuthenticateAs(transport::WorkerIdentity(env->rank), "this program"),
                 "cannot join a job");
    // The coordinator knows workers by their model: a process group's is
    // one frozen placeholder element (nothing of it is ever pushed).
    std::vector<TensorInfo> model = {{kProcessGroupModelName, 1, TensorKind::kFrozen, {1}}};
    auto joined = WorkerClient::Join(*env, model, OptimizerConfig::Sum());
    ThrowIfError(joined.status(), "cannot join the job at " + env->coordinator);
    client_ = std::move(joined).value();
    client_->KeepPsConnectionsAcrossMaps();  // a part's answers on their way still come
    spdlog::info("joined as worker {} of {} for torch.distributed (backend een, {} PS)",
                 client_->rank(), client_->world_size(), client_->num_ps());
    thread_ = std::thread([this] { Loop(); });
  }

  static std::exception_ptr ErrorOf(const Status& s, const std::string& where) {
    try {
      ThrowIfError(s, where);
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  struct Task {
    uint32_t group;
    c10::intrusive_ptr<CallWork> work;
    std::function<CallFinish()> start;
  };
  // A started call: what finishes it, or why it failed to start (it fails
  // in its turn).
  struct Running {
    c10::intrusive_ptr<CallWork> work;
    CallFinish finish;
    std::exception_ptr failed;
  };

  void Loop() {
    // How long a receive may keep a newly issued call from being sent.
    constexpr std::chrono::milliseconds kReceiveSlice(5);
    std::map<uint32_t, std::deque<Running>> running;  // per group, in issue order
    size_t in_flight = 0;
    while (true) {
      std::deque<Task> posted;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (in_flight == 0) cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty() && in_flight == 0) return;  // stopping, nothing left
        posted.swap(tasks_);
      }
      for (Task& t : posted) {
        Running r{std::move(t.work), {}, nullptr};
        try {
          r.finish = t.start();
        } catch (...) {
          r.failed = std::current_exception();
        }
        running[t.group].push_back(std::move(r));
        ++in_flight;
      }
      const size_t done = CompleteAnswered(running);
      in_flight -= done;
      if (done > 0) {
        // The coordinator's progress line: calls done (a worker's "step").
        calls_done_ += done;
        client_->ReportProgress(calls_done_, std::nullopt, 0, 0, 0);
      }
      if (in_flight == 0) continue;
      std::vector<WorkerClient::CollectiveCall*> waiting;
      for (auto& [group, calls] : running) {
        for (Running& r : calls) {
          if (r.finish.call) waiting.push_back(r.finish.call.get());
        }
      }
      if (Status s = client_->CollectiveReceive(waiting, kReceiveSlice); !s.ok()) {
        // The job ended or the PS refused this worker: every call in flight fails.
        for (auto& [group, calls] : running) {
          for (Running& r : calls) {
            r.work->Fail(ErrorOf(s, fmt::format("collective call of group {}", group)));
          }
        }
        running.clear();
        in_flight = 0;
      }
    }
  }

  // Completes (or fails), per group in order, the calls whose answers are
  // all in. Returns how many.
  size_t CompleteAnswered(std::map<uint32_t, std::deque<Running>>& running) {
    size_t done = 0;
    for (auto it = running.begin(); it != running.end();) {
      std::deque<Running>& calls = it->second;
      while (!calls.empty()) {
        Running& head = calls.front();
        if (!head.failed && head.finish.call) {
          Result<bool> answered = client_->CollectiveTake(*head.finish.call);
          if (answered.ok() && !*answered) break;
          if (!answered.ok()) {
            const worker_messages::ReduceFields& c = head.finish.call->call;
            head.failed = ErrorOf(answered.status(),
                                  fmt::format("collective call {} of group {}", c.seq, c.group));
          }
        }
        if (!head.failed) {
          try {
            head.finish.done();
          } catch (...) {
            head.failed = std::current_exception();
          }
        }
        if (head.failed) {
          head.work->Fail(head.failed);
        } else {
          head.work->Complete();
        }
        calls.pop_front();
        ++done;
      }
      it = calls.empty() ? running.erase(it) : std::next(it);
    }
    return done;
  }

  std::unique_ptr<WorkerClient> client_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::thread thread_;
  std::map<std::vector<int>, int> occurrences_;
  uint64_t calls_done_ = 0;  // by Loop()
};

namespace {

// One collective call of a group over the PS: `in` (numel elements of the
// call's dtype; none for a broadcast's non-root) is split into parts, one
// per PS (or one part when small); each part's result lands in `out`:
// numel elements, or size x numel for a gather (rank-major).
// Sends the parts now; the session completes the returned call as its
// answers come. `absent` (shared with the group) then gets the group ranks
// absent from the result (lost members the job went on without).
CallFinish StartCall(WorkerClient& client, worker_messages::ReduceFields call, const void* in,
                     void* out, const std::shared_ptr<AbsentRanks>& absent) {
  const size_t element = wire::ElementBytes(call.dtype);
  const uint64_t numel = call.total;
  const size_t ps = client.num_ps();
  const bool sends = call.op != wire::ReduceOp::BROADCAST || call.rank == call.root;
  auto c = std::make_shared<WorkerClient::CollectiveCall>();
  const size_t pieces = numel * element < kSplitBytes ? 1 : std::min<uint64_t>(ps, numel);
  for (size_t p = 0; p < pieces; ++p) {
    const uint64_t begin = numel * p / pieces, end = numel * (p + 1) / pieces;
    if (end == begin && numel > 0) continue;
    WorkerClient::CollectivePart part;
    part.ps = client.collective_ps(pieces == 1 ? (call.group + call.seq) % ps : p);
    part.offset = begin;
    part.numel = end - begin;
    if (sends) {
      part.data = static_cast<const std::byte*>(in) + begin * element;
      part.bytes = part.numel * element;
    }
    c->parts.push_back(part);
  }
  const size_t size = static_cast<size_t>(call.contributors);
  ThrowIfError(client.CollectiveSend(call, c->parts),
               fmt::format("collective call {} of group {}", call.seq, call.group));
  c->call = call;
  c->take = [call, element, numel, size, out](const WorkerClient::CollectivePart& part,
                                              const transport::Frame& result) -> Status {
    const size_t bytes = part.numel * element;
    const bool gather = call.op == wire::ReduceOp::GATHER;
    if (result.size() != (gather ? size * bytes : bytes)) {
      return Internal(fmt::format("a PS answered part {} of collective call {} with {} bytes",
                                  part.offset, call.seq, result.size()));
    }
    auto* dst = static_cast<std::byte*>(out);
    if (!gather) {
      std::memcpy(dst + part.offset * element, result.data(), bytes);
      return Status::Ok();
    }
    for (size_t r = 0; r < size; ++r) {
      std::memcpy(dst + (r * numel + part.offset) * element, result.data() + r * bytes, bytes);
    }
    return Status::Ok();
  };
  return {c, [c, absent] { absent->Set(c->absent); }};
}

}  // namespace

c10::intrusive_ptr<ProcessGroup> ProcessGroup::Create(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size,
                                                      std::chrono::milliseconds timeout) {
  auto session = CollectiveSession::Get();
  if (size < 1 || rank < 0 || rank >= size || size > session->client().world_size()) {
    Fail(fmt::format("a group of {} with rank {} in a job of {} workers", size, rank,
                     session->client().world_size()));
  }
  // The members' job ranks, through the store torch gives this group.
  const int me = session->client().rank();
  store->setTimeout(timeout);
  store->set("een/member/" + std::to_string(rank),
             std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&me),
                                  reinterpret_cast<const uint8_t*>(&me) + sizeof me));
  std::vector<int> members(size);
  for (int r = 0; r < size; ++r) {
    const std::vector<uint8_t> v = store->get("een/member/" + std::to_string(r));
    if (v.size() != sizeof(int)) Fail("the c10d store holds a bad member record");
    std::memcpy(&members[r], v.data(), sizeof(int));
  }
  auto pg = c10::make_intrusive<ProcessGroup>(session, session->GroupId(members), rank, size);
  pg->members_ = std::move(members);
  return pg;
}

ProcessGroup::ProcessGroup(std::shared_ptr<CollectiveSession> session, uint32_t group, int rank,
                           int size)
    : c10d::ProcessGroup(rank, size),
      session_(std::move(session)),
      group_(group),
      absent_(std::make_shared<AbsentRanks>()) {}

std::vector<int> ProcessGroup::LiveRanks() const {
  const std::vector<int32_t> absent = absent_->Get();
  std::vector<int> live;
  for (int r = 0; r < getSize(); ++r) {
    if (std::find(absent.begin(), absent.end(), r) == absent.end()) live.push_back(r);
  }
  return live;
}

ProcessGroup::~ProcessGroup() = default;

worker_messages::ReduceFields ProcessGroup::Fields() const {
  worker_messages::ReduceFields f;
  f.worker = session_->client().rank();
  f.group = group_;
  f.rank = getRank();
  f.contributors = getSize();
  bool identity = true;  // the whole job, in rank order
  for (size_t r = 0; r < members_.size(); ++r) identity &= members_[r] == static_cast<int>(r);
  if (!identity) f.members.assign(members_.begin(), members_.end());
  return f;
}

uint64_t ProcessGroup::getSequenceNumberForGroup() {
  std::lock_guard<std::mutex> lock(session_->queue_mutex());
  return next_seq_ - 1;
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::Enqueue(c10d::OpType type,
                                                     std::vector<at::Tensor> outputs,
                                                     std::function<CallFinish(uint64_t)> start) {
  auto work = c10::make_intrusive<CallWork>(type, outputs);
  session_->Post(group_, &next_seq_, work, std::move(start));
  return work;
}

namespace {

// A call with nothing to send: `finish` runs once the calls before it
// finished (it copies their results).
std::function<CallFinish(uint64_t)> Afterwards(std::function<void()> finish) {
  return [finish = std::move(finish)](uint64_t) { return CallFinish{nullptr, finish}; };
}

void OneTensor(const std::vector<at::Tensor>& tensors, const char* what) {
  if (tensors.size() != 1) {
    Fail(fmt::format("{} takes one tensor per process (got {})", what, tensors.size()));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  OneTensor(tensors, "allreduce");
  at::Tensor t = tensors[0];
  const wire::ReduceOp op = WireOp(opts.reduceOp, t);
  const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
  const wire::ElementType dtype = ElementTypeOf(t);
  auto* client = &session_->client();
  const worker_messages::ReduceFields base = Fields();
  const std::shared_ptr<AbsentRanks> absent = absent_;
  const int size = getSize();
  return Enqueue(c10d::OpType::ALLREDUCE, tensors, [=](uint64_t seq) {
    Host h(t);
    worker_messages::ReduceFields call = base;
    call.seq = seq;
    call.op = op;
    call.dtype = dtype;
    call.total = static_cast<uint64_t>(h.host.numel());
    CallFinish f = StartCall(*client, call, h.host.data_ptr(), h.host.data_ptr(), absent);
    f.done = [absent_set = f.done, h, average, size]() mutable {
      absent_set();
      if (average) h.host.div_(size);
      h.Finish();
    };
    return f;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) Fail("allreduce_coalesced of no tensors");
  for (const at::Tensor& t : tensors) {
    if (t.scalar_type() != tensors[0].scalar_type()) {
      Fail("allreduce_coalesced takes tensors of one dtype");
    }
  }
  std::vector<at::Tensor> flat = {
      at::cat(c10::fmap(tensors, [](const at::Tensor& t) { return t.reshape({-1}); }))};
  auto work = allreduce(flat, opts);
  // Split back once done, still on the session's thread, in order.
  std::vector<at::Tensor> outputs = tensors;
  at::Tensor all = flat[0];
  return Enqueue(c10d::OpType::ALLREDUCE, outputs, Afterwards([work, all, outputs] {
                   work->wait();
                   int64_t at = 0;
                   for (const at::Tensor& t : outputs) {
                     t.copy_(all.narrow(0, at, t.numel()).view_as(t));
                     at += t.numel();
                   }
                 }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  OneTensor(tensors, "broadcast");
  if (opts.rootRank < 0 || opts.rootRank >= getSize()) {
    Fail(fmt::format("broadcast from rank {} of a group of {}", opts.rootRank, getSize()));
  }
  at::Tensor t = tensors[0];
  const wire::ElementType dtype = ElementTypeOf(t);
  auto* client = &session_->client();
  const worker_messages::ReduceFields base = Fields();
  const std::shared_ptr<AbsentRanks> absent = absent_;
  const int root = static_cast<int>(opts.rootRank);
  return Enqueue(c10d::OpType::BROADCAST, tensors, [=](uint64_t seq) {
    Host h(t);
    worker_messages::ReduceFields call = base;
    call.seq = seq;
    call.root = root;
    call.op = wire::ReduceOp::BROADCAST;
    call.dtype = dtype;
    call.total = static_cast<uint64_t>(h.host.numel());
    CallFinish f = StartCall(*client, call, h.host.data_ptr(), h.host.data_ptr(), absent);
    f.done = [absent_set = f.done, h]() mutable {
      absent_set();
      h.Finish();
    };
    return f;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  OneTensor(tensors, "reduce");
  // Every member gets the result; the root's tensor is the one that counts.
  c10d::AllreduceOptions all;
  all.reduceOp = opts.reduceOp;
  if (opts.rootRank == getRank()) return allreduce(tensors, all);
  std::vector<at::Tensor> scratch = {tensors[0].clone()};
  return allreduce(scratch, all);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions&) {
  if (output.numel() != input.numel() * getSize() || output.scalar_type() != input.scalar_type()) {
    Fail(fmt::format("allgather into {} elements of {} from {} of {} in a group of {}",
                     output.numel(), c10::toString(output.scalar_type()), input.numel(),
                     c10::toString(input.scalar_type()), getSize()));
  }
  const wire::ElementType dtype = ElementTypeOf(input);
  auto* client = &session_->client();
  const worker_messages::ReduceFields base = Fields();
  const std::shared_ptr<AbsentRanks> absent = absent_;
  at::Tensor in = input, out = output;
  return Enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, [=](uint64_t seq) {
    Host src(in), dst(out);
    worker_messages::ReduceFields call = base;
    call.seq = seq;
    call.op = wire::ReduceOp::GATHER;
    call.dtype = dtype;
    call.total = static_cast<uint64_t>(src.host.numel());
    CallFinish f = StartCall(*client, call, src.host.data_ptr(), dst.host.data_ptr(), absent);
    f.done = [absent_set = f.done, src, dst]() mutable {
      absent_set();
      dst.Finish();
    };
    return f;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  OneTensor(inputs, "allgather");
  if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize()) {
    Fail(fmt::format("allgather needs one list of {} output tensors", getSize()));
  }
  for (const at::Tensor& o : outputs[0]) {
    if (o.numel() != inputs[0].numel() || o.scalar_type() != inputs[0].scalar_type()) {
      Fail("allgather's output tensors must match its input's size and dtype");
    }
  }
  at::Tensor flat =
      at::empty({inputs[0].numel() * getSize()}, inputs[0].options().device(at::kCPU));
  auto work = _allgather_base(flat, inputs[0], opts);
  std::vector<at::Tensor> results = outputs[0];
  const int64_t n = inputs[0].numel();
  return Enqueue(
      c10d::OpType::ALLGATHER, results, Afterwards([work, flat, results, n] {
        work->wait();
        for (size_t r = 0; r < results.size(); ++r) {
          results[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view_as(results[r]));
        }
      }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (outputs.size() != static_cast<size_t>(getSize())) {
    Fail("allgather_coalesced needs one output list per member");
  }
  std::vector<at::Tensor> flat_in = {
      at::cat(c10::fmap(inputs, [](const at::Tensor& t) { return t.reshape({-1}); }))};
  at::Tensor gathered = at::empty({flat_in[0].numel() * getSize()}, flat_in[0].options());
  auto work = _allgather_base(gathered, flat_in[0], opts);
  std::vector<at::Tensor> all;
  for (const auto& list : outputs) all.insert(all.end(), list.begin(), list.end());
  auto lists = outputs;
  const int64_t per = flat_in[0].numel();
  return Enqueue(c10d::OpType::ALLGATHER_COALESCED, all, Afterwards([work, gathered, lists, per] {
                   work->wait();
                   for (size_t r = 0; r < lists.size(); ++r) {
                     int64_t at = static_cast<int64_t>(r) * per;
                     for (const at::Tensor& t : lists[r]) {
                       t.copy_(gathered.narrow(0, at, t.numel()).view_as(t));
                       at += t.numel();
                     }
                   }
                 }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::GatherOptions& opts) {
  OneTensor(inputs, "gather");
  const bool root = opts.rootRank == getRank();
  if (root && (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize())) {
    Fail(fmt::format("gather's root needs one list of {} output tensors", getSize()));
  }
  if (!root && !outputs.empty() && !outputs[0].empty()) Fail("gather: only the root gets outputs");
  std::vector<std::vector<at::Tensor>> lists = {
      root ? outputs[0] : std::vector<at::Tensor>(getSize(), at::empty_like(inputs[0], at::kCPU))};
  return allgather(lists, inputs, c10d::AllgatherOptions());
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  OneTensor(outputs, "scatter");
  const bool root = opts.rootRank == getRank();
  if (root && (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != getSize())) {
    Fail(fmt::format("scatter's root needs one list of {} input tensors", getSize()));
  }
  // The root's inputs go to everyone; each keeps its own piece.
  const int64_t n = outputs[0].numel();
  std::vector<at::Tensor> all = {
      root ? at::cat(c10::fmap(inputs[0], [](const at::Tensor& t) { return t.reshape({-1}); }))
                 .to(at::kCPU)
           : at::empty({n * getSize()}, outputs[0].options().device(at::kCPU))};
  c10d::BroadcastOptions b;
  b.rootRank = opts.rootRank;
  auto work = broadcast(all, b);
  at::Tensor out = outputs[0], flat = all[0];
  const int64_t at = n * getRank();
  return Enqueue(c10d::OpType::SCATTER, outputs, Afterwards([work, out, flat, at, n] {
                   work->wait();
                   out.copy_(flat.narrow(0, at, n).view_as(out));
                 }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  if (input.numel() != output.numel() * getSize()) {
    Fail(fmt::format("reduce_scatter of {} elements into {} in a group of {}", input.numel(),
                     output.numel(), getSize()));
  }
  std::vector<at::Tensor> all = {input.reshape({-1}).to(at::kCPU).clone()};
  c10d::AllreduceOptions a;
  a.reduceOp = opts.reduceOp;
  auto work = allreduce(all, a);
  at::Tensor out = output, flat = all[0];
  const int64_t n = output.numel(), at = n * getRank();
  return Enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, Afterwards([work, out, flat, at, n] {
                   work->wait();
                   out.copy_(flat.narrow(0, at, n).view_as(out));
                 }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  OneTensor(outputs, "reduce_scatter");
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != getSize()) {
    Fail(fmt::format("reduce_scatter needs one list of {} input tensors", getSize()));
  }
  at::Tensor flat =
      at::cat(c10::fmap(inputs[0], [](const at::Tensor& t) { return t.reshape({-1}); }));
  return _reduce_scatter_base(outputs[0], flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::barrier(const c10d::BarrierOptions&) {
  // A one-element allreduce: done once every member came.
  std::vector<at::Tensor> one = {at::zeros({1}, at::kInt)};
  return allreduce(one, c10d::AllreduceOptions());
}

}  // namespace een
