// InProcessCluster: a coordinator and PS processes as threads of the test
// process, over the in-process transport, plus helpers to join as workers.
// Every thread is stopped and joined by the destructor.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "common/job_env.h"
#include "launcher/coordinator.h"
#include "ps/parameter_server.h"
#include "worker/worker_client.h"

namespace een::testing {

class InProcessCluster {
 public:
  InProcessCluster(int num_ps, int num_workers,
                   std::chrono::milliseconds threshold = std::chrono::milliseconds(500)) {
    static std::atomic<int> counter{0};
    const std::string name = "cluster" + std::to_string(++counter);
    CoordinatorOptions o;
    o.listen_address = "mem://" + name + "/coordinator";
    o.job.ps = num_ps;
    o.job.workers = num_workers;
    o.job.failover_threshold = threshold;
    o.job.heartbeat_interval = std::chrono::milliseconds(50);
    o.job.startup_timeout = std::chrono::milliseconds(20000);
    coordinator_ = std::make_unique<Coordinator>(o);
    Status s = coordinator_->Bind();
    if (!s.ok()) throw std::runtime_error(s.ToString());
    coordinator_thread_ = std::thread([this] {
      coordinator_result_.set_value(coordinator_->Run(stop_coordinator_));
      coordinator_ended_ = true;
    });
    base_.coordinator = o.listen_address;
    base_.world_size = num_workers;
    base_.num_ps = num_ps;
    base_.data_transport = "mem";
    base_.run_dir = name;
    base_.failover_threshold = threshold;
    base_.heartbeat_interval = std::chrono::milliseconds(50);
    base_.startup_timeout = std::chrono::milliseconds(20000);
    ps_stop_ = std::vector<std::atomic<bool>>(num_ps);
    for (int r = 0; r < num_ps; ++r) {
      ps_threads_.emplace_back([this, r] {
        JobEnvironment env = base_;
        env.role = "ps";
        env.rank = r;
        ps::ParameterServer server(env);
        Status s = server.Join(ps_stop_[r]);
        if (s.ok()) s = server.Serve(ps_stop_[r]);
      });
    }
  }

  ~InProcessCluster() {
    for (auto& s : ps_stop_) s = true;
    for (auto& t : ps_threads_) {
      if (t.joinable()) t.join();
    }
    stop_coordinator_ = true;
    coordinator_thread_.join();
  }

  // Workers joined from now on push and pull in `type` (EEN_WIRE_DTYPE).
  void set_worker_wire_type(WireType type) { worker_wire_type_ = type; }

  JobEnvironment WorkerEnv(int rank) const {
    JobEnvironment env = base_;
    env.role = "worker";
    env.rank = rank;
    env.wire_type = worker_wire_type_;
    return env;
  }

  // Joins every worker at once (registration completes only when all are in).
  std::vector<Result<std::unique_ptr<WorkerClient>>> JoinAll(
      const std::vector<std::vector<TensorInfo>>& models, const OptimizerConfig& optimizer) {
    std::vector<std::future<Result<std::unique_ptr<WorkerClient>>>> joins;
    for (size_t r = 0; r < models.size(); ++r) {
      joins.push_back(std::async(std::launch::async, [this, r, &models, &optimizer] {
        return WorkerClient::Join(WorkerEnv(static_cast<int>(r)), models[r], optimizer);
      }));
    }
    std::vector<Result<std::unique_ptr<WorkerClient>>> out;
    for (auto& j : joins) out.push_back(j.get());
    return out;
  }

  // Stops PS `rank` and returns once it stopped (it handles nothing more).
  void StopPs(int rank) {
    ps_stop_[rank] = true;
    ps_threads_[rank].join();
  }
  // Whether the coordinator's Run() has returned (the job ended).
  bool CoordinatorEnded() const { return coordinator_ended_; }
  const std::string& coordinator_address() const { return base_.coordinator; }
  // The coordinator's verdict, once Run() returned (waits up to `timeout`;
  // call it once).
  std::optional<Status> CoordinatorResult(std::chrono::milliseconds timeout) {
    auto f = coordinator_result_.get_future();
    if (f.wait_for(timeout) != std::future_status::ready) return std::nullopt;
    return f.get();
  }

 private:
  JobEnvironment base_;
  WireType worker_wire_type_ = WireType::kF32;
  std::unique_ptr<Coordinator> coordinator_;
  std::atomic<bool> stop_coordinator_{false};
  std::promise<Status> coordinator_result_;
  std::atomic<bool> coordinator_ended_{false};
  std::thread coordinator_thread_;
  std::vector<std::atomic<bool>> ps_stop_;
  std::vector<std::thread> ps_threads_;
};

}  // namespace een::testing
