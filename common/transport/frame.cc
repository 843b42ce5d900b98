#include "common/transport/frame.h"

namespace een::transport {

Frame Frame::Copy(const void* data, size_t size) {
  auto bytes = std::make_shared<std::vector<std::byte>>(size);
  if (size > 0) std::memcpy(bytes->data(), data, size);
  const void* p = bytes->data();
  return Borrow(p, size, std::move(bytes));
}

WritableFrame NewHeapFrame(size_t size) {
  std::shared_ptr<std::byte[]> bytes(new std::byte[size]);  // default-initialised: not zeroed
  std::byte* data = bytes.get();
  return {data, Frame::Borrow(data, size, std::move(bytes))};
}

Frame Frame::Own(std::vector<std::byte> bytes) {
  auto holder = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  const void* p = holder->data();
  size_t n = holder->size();
  return Borrow(p, n, std::move(holder));
}

}  // namespace een::transport
