// Reading gzipped IDX files (the MNIST family's format), as Debian's
// dataset-fashion-mnist package installs them. No LibTorch here.
// Errors name the file and what is wrong with it. Free functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace een::samples {

struct IdxArray {
  std::vector<uint32_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;   // row-major, unsigned bytes
};

// Reads `path` (gzip or plain IDX of unsigned bytes). Throws std::runtime_error.
IdxArray ReadIdx(const std::string& path);

// Where the dataset lives: $EEN_FASHION_MNIST_DIR, else Debian's folder.
std::string FashionMnistDir();

}  // namespace een::samples
