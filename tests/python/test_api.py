"""een's Python API as a user meets it, in local mode (EEN_LOCAL=1: one
process, the server optimizer applied here): what it refuses and how,
accumulation, the learning rate, and the import-time LibTorch check."""
import os
import unittest

os.environ["EEN_LOCAL"] = "1"
os.environ.pop("EEN_COORDINATOR", None)

import torch  # noqa: E402

import een  # noqa: E402


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5),
                               torch.nn.Linear(5, 2))


class Api(unittest.TestCase):
    def test_training_matches_torch_optim_and_fills_buffers(self):
        model, reference = net(), net()
        dp = een.DataParallel(model, optimizer=een.Adam(lr=0.01))
        opt = torch.optim.Adam(reference.parameters(), lr=0.01)
        x = torch.randn(16, 6)
        for _ in range(5):
            dp(x).square().mean().backward()
            dp.step(None, 16)
            opt.zero_grad()
            reference(x).square().mean().backward()
            opt.step()
        for a, b in zip(model.parameters(), reference.parameters()):
            self.assertTrue(torch.allclose(a, b, atol=1e-6))
        self.assertEqual(int(model[1].num_batches_tracked), 5)
        self.assertEqual(dp.global_step, 5)
        self.assertIsNone(model[0].weight.grad)  # cleared, as zero_grad() would
        dp.finish()

    def test_no_sync_accumulates_one_step_of_all_micro_batches(self):
        model, reference = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
        reference.load_state_dict(model.state_dict())
        dp = een.DataParallel(model, optimizer=een.SGD(0.1))
        x = torch.randn(8, 4)
        with dp.no_sync():
            (model(x[:4]).sum() / 2).backward()
        (model(x[4:]).sum() / 2).backward()
        dp.step()
        (reference(x).sum() / 2).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= 0.1 * p.grad
        self.assertTrue(torch.allclose(model.weight, reference.weight, atol=1e-6))
        self.assertEqual(dp.global_step, 1)
        dp.finish()

    def test_mistakes_raise_een_errors_that_say_what_to_do(self):
        model = torch.nn.Linear(3, 1)
        with self.assertRaisesRegex(TypeError, "een.Sum"):
            een.DataParallel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        with self.assertRaisesRegex(TypeError, "torch.nn.Module"):
            een.DataParallel(lambda x: x)
        with self.assertRaisesRegex(een.Error, "float32 on the CPU"):
            een.DataParallel(torch.nn.Linear(3, 1).double())
        with self.assertRaisesRegex(een.Error, "buffers="):
            een.DataParallel(model, buffers="sometimes")
        dp = een.DataParallel(model, optimizer=een.SGD(0.1, clip_grad_norm=1.0))
        with self.assertRaises(een.Error) as caught:
            dp.step()  # no backward() since the last step
        self.assertEqual(caught.exception.code, een.ErrorCode.INVALID_ARGUMENT)
        self.assertIn("backward()", str(caught.exception))
        model(torch.ones(2, 3)).sum().backward()
        dp.step(torch.tensor(1.5), 2)  # a tensor loss is taken too
        self.assertGreater(dp.grad_norm, 0)
        dp.learning_rate = 0.5
        self.assertEqual(dp.learning_rate, 0.5)
        with self.assertRaises(een.Error):
            dp.learning_rate = float("nan")
        model(torch.ones(2, 3)).sum().backward()
        model(torch.ones(2, 3)).sum().backward()  # twice: the hook defers it to dp.step()
        with self.assertRaisesRegex(een.Error, "arrived twice.*dp.no_sync"):
            dp.step()
        self.assertTrue(issubclass(een.RolledBack, een.Error))
        self.assertTrue(issubclass(een.Error, RuntimeError))
        dp.finish()

    def test_a_torch_optimizer_stepping_beside_dp_step_is_an_error(self):
        # Local mode once moved the weights twice, silently (a job undid it).
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        dp = een.DataParallel(model, optimizer=een.SGD(0.1))
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
        with self.assertRaisesRegex(een.Error, "'weight' was changed in place.*optimizer.step"):
            dp.step()
        dp.finish()
        # In sum mode the program's own optimizer is the point.
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        dp = een.DataParallel(model, optimizer=een.Sum())
        for _ in range(3):
            model(torch.ones(2, 3)).sum().backward()
            dp.step()
            opt.step()
            opt.zero_grad()
        dp.finish()

    def test_errors_name_the_python_api_and_a_finished_worker_cannot_step(self):
        model = torch.nn.Linear(3, 1)
        dp = een.DataParallel(model, optimizer=een.SGD(0.1))
        model(torch.ones(2, 3)).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        with self.assertRaises(een.Error) as caught:
            dp.step()
        message = str(caught.exception)
        self.assertIn("clip_grad_norm=max_norm", message)
        self.assertIn("dp.learning_rate = ...", message)
        self.assertNotIn("OptimizerConfig::", message)
        dp.finish()
        with self.assertRaises(een.Error) as caught:
            dp.step()
        self.assertEqual(caught.exception.code, een.ErrorCode.JOB_FINISHED)
        self.assertIn("dp.step() after dp.finish()", str(caught.exception))
        with self.assertRaisesRegex(een.Error, r"not contiguous.*\.contiguous\(\)"):
            bad = torch.nn.Linear(4, 3)
            bad.weight = torch.nn.Parameter(torch.randn(3, 4).t())
            een.DataParallel(bad)

    def test_the_sampler_takes_its_dataloaders_batch_size_and_refuses_another(self):
        dp = een.DataParallel(net(), optimizer=een.SGD(0.1))
        data = torch.utils.data.TensorDataset(torch.arange(40))
        sampler = een.DistributedSampler(data)
        loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)
        self.assertEqual(sorted(int(v) for (batch,) in loader for v in batch), list(range(40)))
        self.assertEqual(sampler._job[1].batch(), 4)
        given = een.DistributedSampler(data, batch_size=8)
        loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=given)
        with self.assertRaisesRegex(ValueError, r"batch_size=8\) is iterated by a DataLoader "
                                                r"with batch_size=4"):
            next(iter(loader))
        dp.finish()

    def test_a_torch_that_runs_another_libtorch_is_refused_at_import(self):
        saved = een._build.TORCH_LIBDIR
        een._build.TORCH_LIBDIR = "/opt/elsewhere/torch/lib"
        try:
            with self.assertRaisesRegex(ImportError, "Rebuild EEN against this torch"):
                een._check_torch()
        finally:
            een._build.TORCH_LIBDIR = saved
        een._check_torch()  # the real one passes


if __name__ == "__main__":
    unittest.main()
