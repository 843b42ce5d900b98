// een._een: the pybind11 binding of libeen_worker for een/__init__.py.
// Everything here forwards to the C++ API (een/data_parallel.h,
// een/sampler.h, een/optimizer.h); the Python-facing names, defaults and
// documentation are in een/__init__.py.
//
// A Python module is not a torch::nn::Module: DataParallel gets the module's
// named parameters and buffers as lists, and MirrorModule builds a C++ module
// tree with the same dotted names holding the very same tensors (shared
// storage and autograd metadata), so gradient hooks, in-place parameter
// updates and buffer synchronisation act on the Python module's tensors.
// Calls that wait for the job (constructor, step, barrier, finish) release
// the GIL. een::Error and een::RolledBack become een.Error and
// een.RolledBack (with .code and .step).
#include <een/data_parallel.h>
#include <een/job_sampler.h>
#include <een/process_group.h>
#include <een/sampler.h>
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The module (under `root`) that holds `dotted`'s last name, created as
// needed; returns it and that last name.
std::pair<torch::nn::Module*, std::string> Owner(torch::nn::Module& root,
                                                 const std::string& dotted) {
  torch::nn::Module* node = &root;
  size_t start = 0;
  for (size_t dot; (dot = dotted.find('.', start)) != std::string::npos; start = dot + 1) {
    const std::string part = dotted.substr(start, dot - start);
    if (part.empty()) throw een::Error("een: bad tensor name '" + dotted + "'");
    auto children = node->named_children();
    if (auto* found = children.find(part)) {
      node = found->get();
    } else {
      node = node->register_module(part, std::make_shared<torch::nn::Module>(part)).get();
    }
  }
  const std::string last = dotted.substr(start);
  if (last.empty()) throw een::Error("een: bad tensor name '" + dotted + "'");
  return {node, last};
}

// A C++ module tree whose named_parameters()/named_buffers() are exactly
// `parameters` and `buffers`, in this order, sharing their tensors.
std::shared_ptr<torch::nn::Module> MirrorModule(const NamedTensors& parameters,
                                                const NamedTensors& buffers) {
  auto root = std::make_shared<torch::nn::Module>("Module");
  for (const auto& [name, tensor] : parameters) {
    auto [owner, last] = Owner(*root, name);
    owner->register_parameter(last, tensor, tensor.requires_grad());
  }
  for (const auto& [name, tensor] : buffers) {
    auto [owner, last] = Owner(*root, name);
    owner->register_buffer(last, tensor);
  }
  return root;
}

// een::Error's messages name the C++ API; Python programs see its Python names.
std::string PythonNames(std::string message) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"OptimizerConfig::WithClipGradNorm(max_norm)",
       "een.SGD/een.Adam(..., clip_grad_norm=max_norm)"},
      {"OptimizerConfig::Sum()", "een.Sum()"},
      {"torch::nn::utils::clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"},
      {"set_learning_rate()", "dp.learning_rate = ..."},
      {"DataParallelOptions::buffers = BufferSync::kLocal",
       "een.DataParallel(..., buffers='local')"},
      {"dp.no_sync()", "\x01"},
      {"no_sync()", "\x01"},
      {"\x01", "dp.no_sync()"},
      {"Step()", "dp.step()"},
      {"Finish()", "dp.finish()"},
      {"Barrier()", "dp.barrier()"},
      {"module->to(device)", "module.to(device)"},
      {"sparse=false", "sparse=False"},
  };
  for (const auto& [from, to] : kNames) {
    const std::string f(from), t(to);
    for (size_t at = 0; (at = message.find(f, at)) != std::string::npos; at += t.size()) {
      message.replace(at, f.size(), t);
    }
  }
  return message;
}

een::BufferSync ParseBuffers(const std::string& mode) {
  if (mode == "broadcast") return een::BufferSync::kBroadcast;
  if (mode == "average") return een::BufferSync::kAverage;
  if (mode == "local") return een::BufferSync::kLocal;
  throw een::Error("een: buffers='" + mode + "' must be 'broadcast', 'average' or 'local'");
}

// een.DataParallel's core: the mirrored module and the C++ DataParallel.
class PyDataParallel {
 public:
  PyDataParallel(const NamedTensors& parameters, const NamedTensors& buffers,
                 const een::OptimizerConfig& optimizer, size_t bucket_bytes,
                 const std::string& buffer_mode, bool raise_rolled_back)
      : mirror_(MirrorModule(parameters, buffers)) {
    een::DataParallelOptions options;
    options.raise_rolled_back = raise_rolled_back;
    options.optimizer = optimizer;
    options.bucket_bytes = bucket_bytes;
    options.buffers = ParseBuffers(buffer_mode);
    py::gil_scoped_release release;
    dp_ = std::make_unique<een::DataParallel>(*mirror_, options);
  }

  een::DataParallel& dp() { return *dp_; }
  void Finish(bool final_values) {
    py::gil_scoped_release release;
    dp_->Finish(final_values);
  }
  void Abandon() { dp_->Abandon(); }

 private:
  std::shared_ptr<torch::nn::Module> mirror_;
  std::unique_ptr<een::DataParallel> dp_;
};

// dp.no_sync()'s guard: accumulation while it lives (a context manager).
class PyNoSync {
 public:
  explicit PyNoSync(een::DataParallel& dp) : guard_(std::in_place, dp.no_sync()) {}
  void Close() { guard_.reset(); }

 private:
  std::optional<een::DataParallel::NoSync> guard_;
};

}  // namespace

PYBIND11_MODULE(_een, m) {
  m.doc() = "EEN's worker library (libeen_worker); use it through `import een`";

  // torch.distributed's backend registry calls this (een/__init__.py): a
  // c10d ProcessGroup, as torch's own Python type (as a C++ extension's
  // backend is returned).
  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<c10d::ProcessGroup> {
        py::gil_scoped_release released;  // joining the job and the store wait
        return een::ProcessGroup::Create(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"));
  // een.live_ranks(): the group ranks in the group's latest collective (all
  // of them for another backend's group).
  m.def("_live_ranks", [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
    if (auto* een_group = dynamic_cast<een::ProcessGroup*>(group.get())) {
      return een_group->LiveRanks();
    }
    std::vector<int> all(group->getSize());
    for (int r = 0; r < group->getSize(); ++r) all[r] = r;
    return all;
  });

  using Code = een::Error::Code;
  py::enum_<Code>(m, "ErrorCode")
      .value("INVALID_ARGUMENT", Code::kInvalidArgument)
      .value("NOT_FOUND", Code::kNotFound)
      .value("DEADLINE_EXCEEDED", Code::kDeadlineExceeded)
      .value("UNAVAILABLE", Code::kUnavailable)
      .value("FAILED_PRECONDITION", Code::kFailedPrecondition)
      .value("ABORTED", Code::kAborted)
      .value("RESOURCE_EXHAUSTED", Code::kResourceExhausted)
      .value("PERMISSION_DENIED", Code::kPermissionDenied)
      .value("DATA_LOSS", Code::kDataLoss)
      .value("INTERNAL", Code::kInternal)
      .value("STALE_EPOCH", Code::kStaleEpoch)
      .value("JOB_FINISHED", Code::kJobFinished)
      .value("ROLLED_BACK", Code::kRolledBack);
  static py::exception<een::Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<een::RolledBack> rolled_back(m, "RolledBack", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const een::RolledBack& e) {
      py::object exc = py::handle(rolled_back.ptr())(PythonNames(e.what()));
      exc.attr("step") = e.step();
      exc.attr("code") = py::cast(e.code());
      PyErr_SetObject(rolled_back.ptr(), exc.ptr());
    } catch (const een::Error& e) {
      py::object exc = py::handle(error.ptr())(PythonNames(e.what()));
      exc.attr("code") = py::cast(e.code());
      PyErr_SetObject(error.ptr(), exc.ptr());
    }
  });

  using Kind = een::OptimizerConfig::Kind;
  py::enum_<Kind>(m, "OptimizerKind")
      .value("SGD", Kind::kSgd)
      .value("ADAM", Kind::kAdam)
      .value("ADAMW", Kind::kAdamW)
      .value("ADAGRAD", Kind::kAdagrad)
      .value("SUM", Kind::kSum);
  py::class_<een::OptimizerConfig>(m, "OptimizerConfig")
      .def(py::init<>())
      .def_readwrite("kind", &een::OptimizerConfig::kind)
      .def_readwrite("lr", &een::OptimizerConfig::lr)
      .def_readwrite("momentum", &een::OptimizerConfig::momentum)
      .def_readwrite("dampening", &een::OptimizerConfig::dampening)
      .def_readwrite("nesterov", &een::OptimizerConfig::nesterov)
      .def_readwrite("weight_decay", &een::OptimizerConfig::weight_decay)
      .def_readwrite("beta1", &een::OptimizerConfig::beta1)
      .def_readwrite("beta2", &een::OptimizerConfig::beta2)
      .def_readwrite("eps", &een::OptimizerConfig::eps)
      .def_readwrite("lr_decay", &een::OptimizerConfig::lr_decay)
      .def_readwrite("initial_accumulator", &een::OptimizerConfig::initial_accumulator)
      .def_readwrite("clip_grad_norm", &een::OptimizerConfig::clip_grad_norm);

  py::class_<een::MembershipChange>(m, "MembershipChange")
      .def_readonly("step", &een::MembershipChange::step)
      .def_readonly("live", &een::MembershipChange::live)
      .def_readonly("epoch", &een::MembershipChange::epoch)
      .def_readonly("shares", &een::MembershipChange::shares)
      .def_property_readonly("data_step", &een::MembershipChange::layout_step)
      .def_property_readonly("unfinished",
                             [](const een::MembershipChange& c) {
                               std::vector<std::pair<int, uint64_t>> out;
                               for (const auto& u : c.unfinished) {
                                 out.emplace_back(u.worker, u.from_step);
                               }
                               return out;
                             })
      .def("__repr__", [](const een::MembershipChange& c) {
        auto list = [](const auto& values) {
          std::string out;
          for (const auto& v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
          return "[" + out + "]";
        };
        return "MembershipChange(step=" + std::to_string(c.step) + ", live=" + list(c.live) +
               ", epoch=" + std::to_string(c.epoch) + ", shares=" + list(c.shares) +
               ", data_step=" + std::to_string(c.layout_step()) + ")";
      });

  py::class_<een::DistributedSampler>(m, "DistributedSampler")
      .def(py::init<size_t, int, int, bool, uint64_t, bool>(), py::arg("dataset_size"),
           py::arg("rank"), py::arg("world_size"), py::arg("shuffle"), py::arg("seed"),
           py::arg("drop_last"))
      .def("set_epoch", &een::DistributedSampler::set_epoch)
      .def("indices", &een::DistributedSampler::indices)
      .def("permutation", &een::DistributedSampler::permutation)
      .def("batch", &een::DistributedSampler::Batch)
      .def("slice", &een::DistributedSampler::Slice)
      .def("num_samples", &een::DistributedSampler::num_samples);
  py::class_<een::JobSampler>(m, "JobSampler")
      .def(py::init([](PyDataParallel& dp, size_t dataset_size, bool shuffle, uint64_t seed,
                       size_t batch) {
             return std::make_unique<een::JobSampler>(dp.dp(), dataset_size, shuffle, seed, batch);
           }),
           py::keep_alive<1, 2>())
      .def("begin", &een::JobSampler::Begin)
      .def("next", &een::JobSampler::Next)
      .def("batch", &een::JobSampler::batch)
      .def("give_batch", &een::JobSampler::GiveBatch)
      .def("data_epoch", &een::JobSampler::data_epoch);
  m.def("position_after",
        [](uint64_t steps, int world_size, const std::vector<een::MembershipChange>& changes,
           uint64_t dataset_size, uint64_t batch) {
          const een::DataPosition at =
              een::PositionAfter(steps, world_size, changes, dataset_size, batch);
          return std::make_pair(at.epoch, at.position);
        });
  m.def("step_data_at",
        [](uint64_t step, int world_size, const std::vector<een::MembershipChange>& changes,
           uint64_t dataset_size, uint64_t batch) {
          een::StepData at = een::StepDataAt(step, world_size, changes, dataset_size, batch);
          return py::make_tuple(at.epoch, at.position, std::move(at.owed));
        });

  py::class_<PyNoSync>(m, "NoSync").def("close", &PyNoSync::Close);

  py::class_<PyDataParallel>(m, "DataParallel")
      .def(py::init<const NamedTensors&, const NamedTensors&, const een::OptimizerConfig&, size_t,
                    const std::string&, bool>())
      .def("rank", [](PyDataParallel& self) { return self.dp().rank(); })
      .def("world_size", [](PyDataParallel& self) { return self.dp().world_size(); })
      .def("steps", [](PyDataParallel& self) { return self.dp().step(); })
      .def("live_count", [](PyDataParallel& self) { return self.dp().live_count(); })
      .def("live_index", [](PyDataParallel& self) { return self.dp().live_index(); })
      .def("membership_changes",
           [](PyDataParallel& self) { return self.dp().membership_changes(); })
      .def("step",
           [](PyDataParallel& self, std::optional<double> loss, int64_t samples) {
             een::DataParallel& dp = self.dp();
             py::gil_scoped_release release;
             if (loss) {
               dp.Step(*loss, samples);
             } else {
               dp.Step();
             }
           })
      .def(
          "no_sync", [](PyDataParallel& self) { return std::make_unique<PyNoSync>(self.dp()); },
          py::keep_alive<0, 1>())
      .def("set_learning_rate",
           [](PyDataParallel& self, double lr) { self.dp().set_learning_rate(lr); })
      .def("learning_rate", [](PyDataParallel& self) { return self.dp().learning_rate(); })
      .def("grad_norm", [](PyDataParallel& self) { return self.dp().grad_norm(); })
      .def("consistency", [](PyDataParallel& self) { return self.dp().consistency(); })
      .def("staleness", [](PyDataParallel& self) { return self.dp().staleness(); })
      .def("dynamic_slicing", [](PyDataParallel& self) { return self.dp().dynamic_slicing(); })
      .def("batch_slice",
           [](PyDataParallel& self, uint64_t batch) {
             een::DataParallel::BatchSlice s = self.dp().batch_slice(batch);
             return py::make_tuple(s.offset, s.count);
           })
      .def("next_batch",
           [](PyDataParallel& self) {
             een::DataParallel& dp = self.dp();
             py::gil_scoped_release release;
             return dp.NextBatch();
           })
      .def("pull_parameters",
           [](PyDataParallel& self) {
             een::DataParallel& dp = self.dp();
             py::gil_scoped_release release;
             dp.PullParameters();
           })
      .def("barrier",
           [](PyDataParallel& self) {
             een::DataParallel& dp = self.dp();
             py::gil_scoped_release release;
             dp.Barrier();
           })
      .def("optimizer_state",
           [](PyDataParallel& self) {
             een::DataParallel& dp = self.dp();
             std::vector<een::ParameterState> states;
             {
               py::gil_scoped_release release;
               states = dp.optimizer_state();
             }
             std::vector<std::tuple<std::string, torch::Tensor, int64_t,
                                    std::map<std::string, torch::Tensor>>>
                 out;
             for (een::ParameterState& s : states) {
               out.emplace_back(std::move(s.name), std::move(s.value), s.step, std::move(s.state));
             }
             return out;
           })
      .def("takes_checkpoint", [](PyDataParallel& self) { return self.dp().takes_checkpoint(); })
      .def("load_state",
           [](PyDataParallel& self,
              const std::vector<std::tuple<std::string, std::optional<torch::Tensor>, int64_t,
                                           std::map<std::string, torch::Tensor>>>& states) {
             std::vector<een::ParameterState> in;
             for (const auto& [name, value, step, slots] : states) {
               in.push_back({name, value.value_or(torch::Tensor()), step, slots});
             }
             een::DataParallel& dp = self.dp();
             py::gil_scoped_release release;
             return dp.LoadState(in);
           })
      .def("finish", &PyDataParallel::Finish, py::arg("final_values") = true)
      .def("abandon", &PyDataParallel::Abandon);
}
