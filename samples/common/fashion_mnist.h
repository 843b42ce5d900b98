// Fashion-MNIST as LibTorch tensors: images [N, 1, 28, 28] float32,
// normalised with the training set's mean and deviation; labels [N] int64.
// Header-only so that only the samples' own translation units pay for torch.
#pragma once

#include <torch/torch.h>

#include <string>

#include "samples/common/idx_dataset.h"

namespace een::samples {

struct LabelledImages {
  torch::Tensor images;
  torch::Tensor labels;
};

inline LabelledImages LoadFashionMnist(bool train, int64_t limit = 0) {
  const std::string dir = FashionMnistDir();
  const std::string prefix = train ? "train" : "t10k";
  IdxArray images = ReadIdx(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  IdxArray labels = ReadIdx(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  if (images.dims.size() != 3 || labels.dims.size() != 1 || images.dims[0] != labels.dims[0]) {
    throw std::runtime_error("Fashion-MNIST files in " + dir + " do not match each other");
  }
  int64_t n = images.dims[0];
  if (limit > 0 && limit < n) n = limit;
  const int64_t h = images.dims[1], w = images.dims[2];
  auto x = torch::from_blob(images.data.data(), {n, 1, h, w}, torch::kUInt8)
               .to(torch::kFloat)
               .div_(255.0)
               .sub_(0.2860)
               .div_(0.3530);
  auto y = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kLong);
  return {x, y};
}

}  // namespace een::samples
