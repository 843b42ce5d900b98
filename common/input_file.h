// ReadInputFile: the whole of a file the user named on the command line or
// in a config (`what`: "the hostfile", "the config"), refused unless it is
// a regular file of at most `max_bytes`: a device (/dev/zero), a FIFO or a
// folder gets an error naming the path and what it is, never a read that
// blocks or grows without bound. Errors never quote the file's content (a
// file the user may not read, named by mistake or on purpose, is not
// shown through een's messages).
#pragma once

#include <string>

#include "common/status.h"

namespace een {

Result<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                  size_t max_bytes);

}  // namespace een
