"""een: data-parallel PyTorch training through EEN's sharded parameter servers.

    import een, torch
    model = Net()
    dp = een.DataParallel(model, optimizer=een.Adam(lr=1e-3))
    sampler = een.DistributedSampler(train_set)          # this worker's share
    loader = torch.utils.data.DataLoader(train_set, batch_size=32, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(dp(x), y)
            loss.backward()                     # gradients are pushed as buckets fill
            dp.step(loss.item(), len(x))        # the parameters are fresh again
    dp.finish()

Run it under een-launch (`een-launch --ps 2 --workers 4 -- python3 train.py`),
or alone with EEN_LOCAL=1 to debug in one process. This module is a thin
binding over libeen_worker: the semantics are those of the C++ API
een::DataParallel (een/data_parallel.h), which the docstrings below summarise:
the parameters servers average the workers' gradients and apply the optimizer
(een.SGD, een.Adam, een.AdamW, een.Adagrad; een.Sum() leaves the optimizer to
you), buffers (BatchNorm statistics) follow rank 0 or the mean, dp.no_sync()
accumulates, clipping is a server option, and a lost parameter server with
snapshots makes dp.step() raise een.RolledBack.

The extension links one LibTorch; importing een checks that this Python's
torch runs that same LibTorch and says how to rebuild if not.
"""
import contextlib
import numbers
import operator
import os
import sys
import weakref

import torch
import torch.utils.data

from . import _build


def _loaded_libtorch_dir():
    """The folder of the libtorch_cpu this process has loaded (torch's)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith("libtorch_cpu."):
                    return os.path.dirname(os.path.realpath(path))
    except OSError:
        pass
    return None


def _check_torch():
    built = _build.TORCH_VERSION.split(".")[:2]
    running = torch.__version__.split("+")[0].split(".")[:2]
    loaded = _loaded_libtorch_dir()
    same_dir = loaded is None or loaded == _build.TORCH_LIBDIR
    if built == running and same_dir:
        return
    raise ImportError(
        "een was built against LibTorch %s in %s, but this Python's torch %s runs the LibTorch "
        "in %s: one process cannot load both. Rebuild EEN against this torch: cmake -S . -B build "
        "-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') "
        "-DPython3_EXECUTABLE=$(command -v python3), or run the Python whose torch EEN was built "
        "with (Debian's python3-torch for a build with Debian's libtorch-dev)"
        % (_build.TORCH_VERSION, _build.TORCH_LIBDIR, torch.__version__, loaded or "?"))


_check_torch()

from . import _een  # noqa: E402  (after the check: a wrong LibTorch must not load)

__version__ = _build.EEN_VERSION
Error = _een.Error            # what EEN raises; .code (an een.ErrorCode) says which kind
ErrorCode = _een.ErrorCode
RolledBack = _een.RolledBack  # dp.step(): the job went back to its last snapshot (.step)
MembershipChange = _een.MembershipChange
OptimizerConfig = _een.OptimizerConfig

__all__ = ["DataParallel", "DistributedSampler", "SGD", "Adam", "AdamW", "Adagrad", "Sum",
           "Error", "ErrorCode", "RolledBack", "position_after", "step_data_at", "OptimizerConfig", "MembershipChange",
           "live_ranks"]


def _optimizer(kind, clip_grad_norm, **fields):
    config = _een.OptimizerConfig()
    config.kind = kind
    for name, value in fields.items():
        setattr(config, name, value)
    config.clip_grad_norm = float(clip_grad_norm)
    return config


def SGD(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, clip_grad_norm=0.0):
    """torch.optim.SGD on the parameter servers; clip_grad_norm > 0 clips the
    mean gradient to that global L2 norm first (as clip_grad_norm_ would)."""
    return _optimizer(_een.OptimizerKind.SGD, clip_grad_norm, lr=float(lr),
                      momentum=float(momentum), dampening=float(dampening),
                      weight_decay=float(weight_decay), nesterov=bool(nesterov))


def Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, clip_grad_norm=0.0):
    """torch.optim.Adam on the parameter servers (its state never lives here)."""
    return _optimizer(_een.OptimizerKind.ADAM, clip_grad_norm, lr=float(lr),
                      beta1=float(betas[0]), beta2=float(betas[1]), eps=float(eps),
                      weight_decay=float(weight_decay))


def AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, clip_grad_norm=0.0):
    """torch.optim.AdamW on the parameter servers."""
    return _optimizer(_een.OptimizerKind.ADAMW, clip_grad_norm, lr=float(lr),
                      beta1=float(betas[0]), beta2=float(betas[1]), eps=float(eps),
                      weight_decay=float(weight_decay))


def Adagrad(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
            clip_grad_norm=0.0):
    """torch.optim.Adagrad on the parameter servers."""
    return _optimizer(_een.OptimizerKind.ADAGRAD, clip_grad_norm, lr=float(lr),
                      lr_decay=float(lr_decay), weight_decay=float(weight_decay),
                      initial_accumulator=float(initial_accumulator_value), eps=float(eps))


def Sum():
    """No server optimizer: dp.step() leaves the mean gradient in each .grad
    for a torch optimizer you step yourself after it."""
    return _optimizer(_een.OptimizerKind.SUM, 0.0)


class DataParallel:
    """Trains `module` data-parallel through the job's parameter servers.

    Joins the job from the EEN_* environment een-launch sets, and gives every
    worker rank 0's parameters and buffers. Parameters must be dense and
    contiguous on one device: float32 on the CPU, or float32/bfloat16/float16
    on a GPU (a CUDA build). buffers: 'broadcast' (rank 0's each
    step, as DDP), 'average' (the mean over the workers) or 'local'.
    bucket_bytes: gradient bucket size (DDP's bucket_cap_mb; EEN_BUCKET_BYTES
    overrides). dp(x) calls the module. While an een.DistributedSampler
    follows the job, dp.step() handles a rollback to a snapshot itself (the
    sampler gives the redone batches again); raise_rolled_back=True raises
    een.RolledBack anyway."""

    def __init__(self, module, optimizer=None, bucket_bytes=25 << 20, buffers="broadcast",
                 raise_rolled_back=False):
        if not isinstance(module, torch.nn.Module):
            raise TypeError("een.DataParallel needs a torch.nn.Module, got %s" % type(module))
        if optimizer is None:
            optimizer = SGD(0.01)
        if not isinstance(optimizer, _een.OptimizerConfig):
            given = optimizer.__name__ if isinstance(optimizer, type) else type(optimizer).__name__
            raise TypeError(
                "optimizer=%s: give an EEN optimizer, which the parameter servers apply "
                "(een.SGD, een.Adam, een.AdamW, een.Adagrad), or een.Sum() and step your torch "
                "optimizer after dp.step()" % given)
        self.module = module
        self._optimizer = optimizer
        parameters = list(module.named_parameters())
        buffer_list = [(n, b) for n, b in module.named_buffers() if b is not None]
        self._core = _een.DataParallel(parameters, buffer_list, optimizer, int(bucket_bytes),
                                       str(buffers), bool(raise_rolled_back))
        _live.add(self)
        global _newest
        _newest = weakref.ref(self)

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    forward = __call__

    @property
    def rank(self):
        return self._core.rank()

    @property
    def world_size(self):
        return self._core.world_size()

    @property
    def global_step(self):
        """Steps completed (after --resume or a rollback: from the snapshot's step)."""
        return self._core.steps()

    @property
    def live_count(self):
        """Workers training now (fewer after a worker is lost under --min-workers)."""
        return self._core.live_count()

    @property
    def live_index(self):
        """This worker's place among the live workers."""
        return self._core.live_index()

    @property
    def membership_changes(self):
        return self._core.membership_changes()

    def step(self, loss=None, samples=0):
        """Completes one step after loss.backward(): pushes what is left, waits
        for the parameter servers and puts the new parameters (and buffers) in
        the module. `loss` (a float or a tensor) and `samples` (this worker's
        batch size) feed een-launch's progress line. When the job went back to
        its last snapshot, and no een.DistributedSampler follows the job (or
        raise_rolled_back), raises een.RolledBack: carry on from
        dp.global_step."""
        if isinstance(loss, torch.Tensor):
            loss = loss.detach().item()
        self._core.step(None if loss is None else float(loss), int(samples))

    @contextlib.contextmanager
    def no_sync(self):
        """Gradient accumulation, as DDP's no_sync(): backward() inside only adds
        to .grad; the first backward() after it pushes the sum."""
        guard = self._core.no_sync()
        try:
            yield
        finally:
            guard.close()

    @property
    def learning_rate(self):
        return self._core.learning_rate()

    @learning_rate.setter
    def learning_rate(self, lr):
        """Every worker sets the same value at the same step (a schedule)."""
        self._core.set_learning_rate(float(lr))

    @property
    def grad_norm(self):
        """With clip_grad_norm: the last step's norm of the mean gradient."""
        return self._core.grad_norm()

    @property
    def consistency(self):
        """The job's --consistency: "bsp", "ssp:K" or "async"."""
        return self._core.consistency()

    @property
    def staleness(self):
        """Steps the slowest live worker was behind this one when this step's
        values were pulled (0 under bsp; under ssp:K at most K-1)."""
        return self._core.staleness()

    @property
    def dynamic_slicing(self):
        """Whether the job runs with --dynamic-slicing auto."""
        return self._core.dynamic_slicing()

    def batch_slice(self, batch):
        """This step's slice (offset, count) of the global batch of
        live_count * batch samples: proportional to this worker's speed under
        --dynamic-slicing auto, else (live_index * batch, batch). Take
        sampler.slice(position, offset, count)."""
        return self._core.batch_slice(int(batch))

    def next_batch(self):
        """Under ssp/async: the job's next batch number nobody has taken
        (0, 1, 2, ... once each), so fast workers take more batches:
        batch k is batch k % B of epoch k // B."""
        return self._core.next_batch()

    def pull_parameters(self):
        """Pulls the newest parameters and buffers without a step (under
        ssp/async, after barrier(): what every worker's gradients made). A
        rollback meanwhile (a PS lost) raises een.RolledBack, as barrier()
        does."""
        self._core.pull_parameters()

    def barrier(self):
        self._core.barrier()

    def state_dict(self):
        """A checkpoint plain PyTorch can use, as of this worker's last step:
        {"model": the module's state_dict() (its parameters as the parameter
        servers hold them), "optimizer": the state_dict() of torch.optim's
        optimizer of the job's kind over module.parameters(), holding the
        servers' state: exp_avg, exp_avg_sq and step (Adam, AdamW),
        momentum_buffer (SGD), sum and step (Adagrad), and the current
        learning rate}. torch.save() it; plain torch trains on from it with
        model.load_state_dict(sd["model"]) and
        torch.optim.Adam(model.parameters()).load_state_dict(sd["optimizer"]).
        In sum mode "optimizer" is None: your own optimizer holds that state.
        Raises een.RolledBack as step() does when a lost PS rolled the job back."""
        model = {name: t.detach().clone() for name, t in self.module.state_dict().items()}
        if self._optimizer.kind == _een.OptimizerKind.SUM:
            return {"model": model, "optimizer": None}
        states = self._core.optimizer_state()
        optimizer = _torch_optimizer(self._optimizer, self.module.parameters(),
                                     self._core.learning_rate())
        result = optimizer.state_dict()
        index = {name: i for i, (name, _) in enumerate(self.module.named_parameters())}
        state = {}
        for name, value, step, slots in states:
            model[name] = value.to(model[name].dtype)
            if slots:
                # torch's SGD keeps no "step" and ignores it; load_state_dict() goes on from it
                state[index[name]] = dict(slots, step=torch.tensor(float(step)))
        result["state"] = state
        return {"model": model, "optimizer": result}

    def load_state_dict(self, state_dict):
        """Starts the job from a checkpoint: dp.state_dict()'s, or plain
        PyTorch's {"model": model.state_dict(), "optimizer":
        optimizer.state_dict()} (also spelled "model_state_dict" and
        "optimizer_state_dict"; "optimizer" may be left out) of an optimizer
        of the job's kind over model.parameters(). Every worker calls it
        after een.DataParallel(...), before its first backward(). The module
        takes the model's values, the parameter servers the optimizer's
        state and its learning rate, and the job goes on from the
        checkpoint's step (dp.global_step; 1 for a plain torch SGD checkpoint,
        which counts no steps). Returns False, loading nothing, in a worker
        that joins a running job, or in a job resumed from its own snapshot
        (een-launch --resume): their state is newer."""
        model = _first_of(state_dict, "model", "model_state_dict")
        if model is None:
            raise ValueError("load_state_dict: the checkpoint has no 'model' (or "
                             "'model_state_dict'): give dp.state_dict()'s, or "
                             "{'model': model.state_dict(), 'optimizer': optimizer.state_dict()}")
        optimizer = _first_of(state_dict, "optimizer", "optimizer_state_dict")
        if not self._core.takes_checkpoint():
            return self._core.load_state([])  # says why nothing is loaded, or raises
        self.module.load_state_dict(model)
        names = [name for name, _ in self.module.named_parameters()]
        states = []
        if optimizer is not None:
            states, lr = _parameter_states(optimizer, names)
            if lr is not None and lr != self._core.learning_rate():
                self._core.set_learning_rate(float(lr))
        return self._core.load_state(states)

    def finish(self, final_values=True):
        """Leaves the job; the others go on without this worker (DDP's join()).
        Then waits until every worker finished and puts the job's final
        parameters and buffers in the module, so every rank ends with the
        same model; final_values=False leaves at once (so does sum mode)."""
        self._core.finish(bool(final_values))

    def abandon(self):
        """Leaves the job as a failing worker: the job treats it as lost (a
        replacement under --max-restarts, the others going on under
        --min-workers, else the job fails naming it). Done for you when an
        exception leaves a `with` block or the program."""
        self._core.abandon()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None or (issubclass(exc_type, SystemExit) and exc.code in (None, 0)):
            self.finish()
        else:
            self.abandon()
        return False


# Every DataParallel not yet collected: an exception that ends the program
# abandons them (the job must see a failed worker, not a finished one, as a
# C++ program unwinding from an exception shows it).
_live = weakref.WeakSet()
_newest = None  # the newest DataParallel (a weak reference): the one samplers follow
_previous_excepthook = sys.excepthook


def _first_of(mapping, *keys):
    for key in keys:
        if key in mapping:
            return mapping[key]
    return None


def _parameter_states(optimizer_state, names):
    """torch.optim's state_dict() as (name, None, step, slots) per parameter
    with state, its parameters being model.parameters() in order, and the
    learning rate of its param groups (None if none)."""
    groups = optimizer_state.get("param_groups", [])
    indices = sorted(i for g in groups for i in g.get("params", []))
    if indices and indices != list(range(len(names))):
        raise ValueError("load_state_dict: the optimizer's parameters are not the module's "
                         "(%d in its param groups, %d in the module): save the state of an "
                         "optimizer made over model.parameters()" % (len(indices), len(names)))
    lrs = {float(g["lr"]) for g in groups if "lr" in g}
    if len(lrs) > 1:
        raise ValueError("load_state_dict: the optimizer's param groups have learning rates %s; "
                         "the parameter servers apply one" % sorted(lrs))
    states = []
    for index, entry in optimizer_state.get("state", {}).items():
        index = int(index)
        if not 0 <= index < len(names):
            raise ValueError("load_state_dict: optimizer state for parameter %d of %d" %
                             (index, len(names)))
        step = entry.get("step", 0)
        step = int(step.item() if isinstance(step, torch.Tensor) else step)
        slots = {k: v for k, v in entry.items() if k != "step" and isinstance(v, torch.Tensor)}
        states.append((names[index], None, step, slots))
    return states, (lrs.pop() if lrs else None)


def _torch_optimizer(config, parameters, lr):
    """torch.optim's optimizer of `config`'s kind and hyper-parameters."""
    kind = config.kind
    if kind == _een.OptimizerKind.SGD:
        return torch.optim.SGD(parameters, lr=lr, momentum=config.momentum,
                               dampening=config.dampening, weight_decay=config.weight_decay,
                               nesterov=config.nesterov)
    if kind in (_een.OptimizerKind.ADAM, _een.OptimizerKind.ADAMW):
        make = torch.optim.Adam if kind == _een.OptimizerKind.ADAM else torch.optim.AdamW
        return make(parameters, lr=lr, betas=(config.beta1, config.beta2), eps=config.eps,
                    weight_decay=config.weight_decay)
    if kind == _een.OptimizerKind.ADAGRAD:
        return torch.optim.Adagrad(parameters, lr=lr, lr_decay=config.lr_decay,
                                   weight_decay=config.weight_decay,
                                   initial_accumulator_value=config.initial_accumulator,
                                   eps=config.eps)
    raise ValueError("no torch optimizer for %s" % kind)


def _abandon_on_uncaught(exc_type, exc, traceback):
    for dp in list(_live):
        try:
            dp.abandon()
        except Exception:  # noqa: BLE001  (the program is failing anyway)
            pass
    _previous_excepthook(exc_type, exc, traceback)


sys.excepthook = _abandon_on_uncaught


def _loader_batch_size(sampler, caller):
    """The batch size of the DataLoader iterating `sampler`, when one of the
    first callers (from frame `caller` out: a subclass's __iter__ may come
    between) is the torch BatchSampler a DataLoader made over it (its
    batch_size is the DataLoader's); 0 when not (a loop of its own, a batch
    sampler of the program's): the sampler then learns it from the loop."""
    for _ in range(4):
        if caller is None:
            break
        owner = caller.f_locals.get("self")
        if (isinstance(owner, torch.utils.data.BatchSampler) and owner.sampler is sampler and
                isinstance(owner.batch_size, numbers.Integral) and owner.batch_size > 0):
            return int(owner.batch_size)
        caller = caller.f_back
    return 0


class DistributedSampler(torch.utils.data.Sampler):
    """This worker's share of a dataset, as torch.utils.data.DistributedSampler:
    each epoch the indices are shuffled with seed + epoch (the same order on
    every worker), padded to a multiple of num_replicas (or cut, drop_last)
    and worker `rank` takes every num_replicas-th from its rank on. So batch s
    of all workers together is the global batch of one-process training.
    `dataset` may be a dataset or its length.

    In an EEN job, with num_replicas and rank left out, it follows the job by
    itself (a plain loop, or a DataLoader over it, needs no elastic code):
    each step's batch is drawn for the step the job is at, so after a lost or
    added worker the live workers share the rest of the epoch, after a
    rollback to a snapshot the redone steps' batches come again (dp.step()
    then raises nothing), and a worker that starts mid-job (a replacement,
    --resume) starts at the job's epoch and position: earlier epochs' passes
    yield nothing. batch_size: given, or the DataLoader's when one iterates
    it (found from its batch sampler), or else learned from the loop; the
    job keeps it (so a replacement or --resume finds it).
    If set_epoch() is never called, each pass takes the next epoch. One
    sampler trains: the first one a step is taken in while it draws; others
    (an evaluation's) keep the fixed shares. Under ssp/async, with
    batch_size given, the job deals the batches (a fast worker takes more),
    and each pass ends once every worker's gradients of the epoch are in.
    A rollback under ssp/async raises nothing either: each worker redoes its
    own steps with the batches it had for them. A DataLoader with
    num_workers > 0 draws batches ahead: the job learns how far, and under
    bsp a change's data take effect past what every loader drew, and a
    rollback gives again exactly the batches it undid (under ssp/async a
    rollback gives those drawn ahead a second time, and says so). Limit:
    the epoch's last step is padded to a whole batch by wrapping around
    (drop_last is ignored there)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, batch_size=None):
        try:
            size = operator.index(dataset)  # a size (an int, numpy's, a 0-d int tensor)
        except TypeError:
            size = len(dataset)
        if size < 0:
            raise ValueError("DistributedSampler: the dataset size %d is negative" % size)
        self._follows = num_replicas is None and rank is None
        if num_replicas is None:
            num_replicas = int(os.environ.get("EEN_WORLD_SIZE", "1"))
        if rank is None:
            rank = int(os.environ.get("EEN_RANK", "0"))
        if num_replicas < 1 or not 0 <= rank < num_replicas or size < 0:
            raise ValueError("DistributedSampler: rank %d of %d workers over %d samples is "
                             "invalid (0 <= rank < num_replicas)" % (rank, num_replicas, size))
        if batch_size is not None and (not isinstance(batch_size, numbers.Integral) or
                                       isinstance(batch_size, bool) or batch_size < 1):
            raise ValueError("DistributedSampler: batch_size=%r must be a positive integer "
                             "(the DataLoader's batch_size)" % (batch_size,))
        self.num_replicas, self.rank, self.epoch = num_replicas, rank, 0
        self._size, self._shuffle, self._seed = size, bool(shuffle), int(seed)
        self._batch_size = int(batch_size or 0)
        self._core = _een.DistributedSampler(size, rank, num_replicas, bool(shuffle), int(seed),
                                             bool(drop_last))
        self._job = None  # (DataParallel, _een.JobSampler) once it follows the job
        self._epoch_set, self._passes = False, 0

    def set_epoch(self, epoch):
        epoch = operator.index(epoch)
        if epoch < 0:
            raise ValueError("DistributedSampler.set_epoch(%d): epochs count from 0" % epoch)
        self.epoch = epoch
        self._epoch_set = True
        self._core.set_epoch(self.epoch)

    def _job_sampler(self):
        dp = _newest() if self._follows and _newest is not None else None
        if dp is None:
            return None
        if self._job is None or self._job[0] is not dp:
            batch = self._job[1].batch() if self._job is not None else self._batch_size
            self._job = (dp, _een.JobSampler(dp._core, self._size, self._shuffle, self._seed,
                                             batch))
        return self._job[1]

    def __iter__(self):
        job = self._job_sampler()
        if job is None:
            return iter(self._core.indices())
        loader_batch = _loader_batch_size(self, sys._getframe(1))
        if self._batch_size == 0:
            self._batch_size = loader_batch
            job.give_batch(self._batch_size)
        elif loader_batch not in (0, self._batch_size):
            raise ValueError(
                "een.DistributedSampler(batch_size=%d) is iterated by a DataLoader with "
                "batch_size=%d: the job would lay out batches of %d, and part of each epoch "
                "would go untrained; give the DataLoader's (or leave batch_size out: the "
                "sampler finds it)" % (self._batch_size, loader_batch, self._batch_size))
        if not self._epoch_set and self._passes > 0:
            self.epoch += 1  # set_epoch() never called: each pass the next epoch
        self._passes += 1
        job.begin(self.epoch)
        return self._follow(job)

    @staticmethod
    def _follow(job):
        while True:
            index = job.next()
            if index is None:
                return
            yield index

    def __len__(self):
        """Samples per worker and epoch (under the job's live workers now)."""
        if self._job_sampler() is not None:
            return -(-self._size // max(_newest().live_count, 1))
        return self._core.num_samples()

    def data_epoch(self):
        """The epoch of the data the index given last is of: the pass's, but
        for a batch of the pass before that a rollback at its end undid (it
        comes again first), or under ssp/async one the job dealt."""
        if self._job is not None:
            return self._job[1].data_epoch()
        return self.epoch

    def permutation(self):
        """The whole dataset's order this epoch."""
        return self._core.permutation()

    def batch(self, position, index, count, batch_size):
        """One step's batch when `count` workers train: positions [position,
        position + count * batch_size) form the global batch and the worker at
        `index` takes position + index + i * count (see position_after)."""
        return self._core.batch(int(position), int(index), int(count), int(batch_size))

    def slice(self, position, offset, count):
        """One step's slice under --dynamic-slicing (dp.batch_slice()): positions
        [position + offset, position + offset + count) of the permutation."""
        return self._core.slice(int(position), int(offset), int(count))


def position_after(steps, world_size, membership_changes, dataset_size, batch_size):
    """(epoch, position) where the data stands after `steps` steps: where a
    worker that starts mid-job (resume, rollback, replacement) carries on.
    An explicit loop's layout (batch()): a lost worker's unfinished steps
    are not dealt again; een.DistributedSampler deals them (step_data_at)."""
    return _een.position_after(int(steps), int(world_size), list(membership_changes),
                               int(dataset_size), int(batch_size))


def step_data_at(step, world_size, membership_changes, dataset_size, batch_size):
    """(epoch, position, owed): what step `step` draws as een.DistributedSampler
    follows the job: the positions of that epoch's order a lost worker left
    untrained (`owed`, drawn first), then fresh ones from `position` on."""
    return _een.step_data_at(int(step), int(world_size), list(membership_changes),
                             int(dataset_size), int(batch_size))


def live_ranks(group=None):
    """The ranks of `group` (torch.distributed's default group when None)
    whose contributions its latest collective included. Under the een
    backend with --min-workers, a rank lost mid-job is left out and the job
    goes on: dist.get_world_size() keeps the launch size (DDP divides by
    it), and every float sum is scaled by world size / live ranks, so DDP's
    mean gradient is the survivors' mean. Other backends: every rank."""
    import torch.distributed as dist
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _een._live_ranks(group)


def _register_backend():
    """torch.distributed's `een` backend (een/process_group.h): an unchanged
    DDP script with init_process_group("een") moves its gradients through the
    parameter servers."""
    import torch.distributed as dist
    if not dist.is_available() or "EEN" in dist.Backend._plugins:
        return
    dist.Backend.register_backend("een", _een._create_process_group)


_register_backend()
