// Files een writes that others must not read or redirect.
//   WriteNewPrivateFile: creates `path` for this user only (0600) and writes
//     `bytes`. It never follows a symlink and never opens a file that
//     exists (O_CREAT | O_EXCL | O_NOFOLLOW): a name planted in a shared
//     folder fails (FailedPrecondition) instead of being written through.
//   MakePrivateTempFolder: a new folder `prefix`XXXXXX (mkdtemp: an
//     unpredictable name, 0700).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace een {

Status WriteNewPrivateFile(const std::string& path, std::string_view bytes);
Result<std::string> MakePrivateTempFolder(const std::string& prefix);

}  // namespace een
