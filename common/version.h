// This build's version, as every binary's --version prints it ("een X.Y.Z").
// The number is the CMake project's VERSION (CMakeLists.txt).
#pragma once

namespace een {

inline constexpr const char* kVersionLine = "een " EEN_VERSION;

}  // namespace een
