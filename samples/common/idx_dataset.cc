#include "samples/common/idx_dataset.h"

#include <zlib.h>

#include <cstdlib>
#include <stdexcept>

namespace een::samples {

IdxArray ReadIdx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!f) {
    throw std::runtime_error("cannot open " + path +
                             " (install Debian's dataset-fashion-mnist or set "
                             "EEN_FASHION_MNIST_DIR)");
  }
  auto read = [&](void* buf, unsigned n) {
    if (gzread(f, buf, n) != static_cast<int>(n)) {
      gzclose(f);
      throw std::runtime_error(path + " is truncated or not an IDX file");
    }
  };
  uint8_t magic[4];
  read(magic, 4);
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] == 0 || magic[3] > 4) {
    gzclose(f);
    throw std::runtime_error(path + " is not an IDX file of unsigned bytes");
  }
  IdxArray a;
  uint64_t total = 1;
  for (int i = 0; i < magic[3]; ++i) {
    uint8_t b[4];
    read(b, 4);
    a.dims.push_back(uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3]);
    total *= a.dims.back();
  }
  if (total > (1ull << 31)) {
    gzclose(f);
    throw std::runtime_error(path + " declares an implausible size");
  }
  a.data.resize(total);
  read(a.data.data(), static_cast<unsigned>(total));
  gzclose(f);
  return a;
}

std::string FashionMnistDir() {
  const char* dir = std::getenv("EEN_FASHION_MNIST_DIR");
  return dir && *dir ? dir : "/usr/share/datasets/fashion-mnist";
}

}  // namespace een::samples
