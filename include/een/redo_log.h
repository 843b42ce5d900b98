// RedoLog: what a worker took for each of its own steps (a dealt batch, a
// sample index), to give again once a rollback undid those steps (under
// ssp/async each worker goes on from its own step of the snapshot).
// Note() records an item taken for a step; Rollback(step) sets aside, to be
// given again first, what was taken for that step and later ones (ahead of
// what an earlier rollback still had to give); Again() gives the next of
// those. Only the newest `kept` items are remembered.
// Thread safety: one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

namespace een {

template <typename T>
class RedoLog {
 public:
  explicit RedoLog(size_t kept = std::numeric_limits<size_t>::max()) : kept_(kept) {}

  void Note(uint64_t step, T item) {
    taken_.emplace_back(step, std::move(item));
    if (taken_.size() > kept_) taken_.pop_front();
  }
  // Returns how many items are to be given again now.
  size_t Rollback(uint64_t step) {
    std::deque<T> undone;
    while (!taken_.empty() && taken_.back().first >= step) {
      undone.push_front(std::move(taken_.back().second));
      taken_.pop_back();
    }
    undone.insert(undone.end(), again_.begin(), again_.end());
    again_ = std::move(undone);
    return again_.size();
  }
  std::optional<T> Again() {
    if (again_.empty()) return std::nullopt;
    T item = std::move(again_.front());
    again_.pop_front();
    return item;
  }
  bool redoing() const { return !again_.empty(); }
  // Items taken before `step` are never undone from here on.
  void Forget(uint64_t step) {
    while (!taken_.empty() && taken_.front().first < step) taken_.pop_front();
  }

 private:
  size_t kept_;
  std::deque<std::pair<uint64_t, T>> taken_;
  std::deque<T> again_;
};

}  // namespace een
