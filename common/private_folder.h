// MakePrivateFolder: creates a folder (and its parents) that een writes
// the model's state into (snapshots, their membership history). A folder
// it creates is its user's only (0700); one that exists keeps its
// permissions (the user chose them). `ec` says why it could not.
#pragma once

#include <filesystem>
#include <system_error>

namespace een {

inline void MakePrivateFolder(const std::filesystem::path& dir, std::error_code& ec) {
  if (std::filesystem::create_directories(dir, ec)) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
  }
}

}  // namespace een
