// The job secret the authentication fuzz target checks against, and its
// seed writer derives well-formed inputs from (so fuzzing starts past the
// first checks: an admitted PLAIN and CURVE request, a proving routing id,
// a whole credential file).
#pragma once

namespace een::fuzz {

constexpr char kJobSecret[] = "een-fuzz-job-secret-0123456789abcdef0123456789abcdef";

}  // namespace een::fuzz
