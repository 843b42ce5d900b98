"""een.DistributedSampler: each worker's share, as torch's DistributedSampler
defines it, usable with torch.utils.data.DataLoader."""
import unittest

import torch
import torch.utils.data

import een


class Sampler(unittest.TestCase):
    def shards(self, size, workers, **options):
        return [list(een.DistributedSampler(size, workers, rank, **options))
                for rank in range(workers)]

    def test_shards_are_disjoint_equal_sized_and_cover_the_dataset(self):
        shards = self.shards(1000, 4, seed=5)
        self.assertEqual([len(s) for s in shards], [250] * 4)
        self.assertEqual(sorted(i for s in shards for i in s), list(range(1000)))

    def test_dynamic_slices_of_any_share_are_the_global_batch(self):
        sampler = een.DistributedSampler(96, 3, 0, seed=1)
        order = sampler.permutation()
        slices, offset = [], 0
        for count in (13, 3, 8):  # --dynamic-slicing shares of a global batch of 24
            slices += sampler.slice(90, offset, count)
            offset += count
        self.assertEqual(slices, [order[(90 + i) % 96] for i in range(24)])  # wraps at the end

    def test_uneven_sizes_pad_by_wrapping_or_drop(self):
        padded = self.shards(10, 4)
        self.assertEqual([len(s) for s in padded], [3] * 4)
        self.assertEqual(set(i for s in padded for i in s), set(range(10)))
        dropped = self.shards(10, 4, drop_last=True)
        self.assertEqual([len(s) for s in dropped], [2] * 4)
        flat = [i for s in dropped for i in s]
        self.assertEqual(len(set(flat)), 8)

    def test_workers_together_take_the_global_batches_in_order(self):
        samplers = [een.DistributedSampler(96, 3, rank, seed=1) for rank in range(3)]
        order = samplers[0].permutation()
        self.assertEqual(sorted(order), list(range(96)))
        shards = [list(s) for s in samplers]
        for step in range(4):  # batch 8 per worker: positions [24 step, 24 (step + 1))
            together = sorted(i for s in shards for i in s[8 * step:8 * (step + 1)])
            self.assertEqual(together, sorted(order[24 * step:24 * (step + 1)]))
            for rank in range(3):
                self.assertEqual(samplers[rank].batch(24 * step, rank, 3, 8),
                                 shards[rank][8 * step:8 * (step + 1)])

    def test_each_epoch_reshuffles_the_same_way_on_every_worker(self):
        a, b = een.DistributedSampler(100, 2, 0, seed=3), een.DistributedSampler(100, 2, 0, seed=3)
        first = list(a)
        a.set_epoch(1)
        b.set_epoch(1)
        self.assertNotEqual(first, list(a))
        self.assertEqual(list(a), list(b))
        unshuffled = list(een.DistributedSampler(10, 2, 1, shuffle=False))
        self.assertEqual(unshuffled, [1, 3, 5, 7, 9])

    def test_a_dataloader_draws_this_workers_share(self):
        data = torch.utils.data.TensorDataset(torch.arange(50))
        sampler = een.DistributedSampler(data, num_replicas=5, rank=2)
        loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)
        drawn = [int(v) for (batch,) in loader for v in batch]
        self.assertEqual(drawn, list(sampler))
        self.assertEqual(len(drawn), 10)

    def test_defaults_come_from_the_job_and_bad_ranks_are_refused(self):
        with self.assertRaises(ValueError):
            een.DistributedSampler(10, 2, 2)
        with self.assertRaises(ValueError):
            een.DistributedSampler(10, 0, 0)

    def test_position_after_steps_finds_the_epoch_and_the_next_global_batch(self):
        self.assertEqual(een.position_after(10, 4, [], 1000, 8), (0, 320))
        # 4 steps of 32 use up an epoch of 100 (the last wraps): epoch 1 starts at 0
        self.assertEqual(een.position_after(4, 4, [], 100, 8), (1, 0))


if __name__ == "__main__":
    unittest.main()
