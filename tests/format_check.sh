#!/usr/bin/env bash
# format_check: every C++ file git knows is formatted as .clang-format says.
# Prints the files that are not and how to fix them.
set -euo pipefail
cd "$1"
tool=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$tool" ]; then
  echo "format_check: clang-format is not installed: apt-get install clang-format-14" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v '^tests/fuzz/corpus/')
if [ ${#files[@]} -eq 0 ]; then
  echo "format_check: no C++ files found by git in $1 (not a git checkout?)" >&2
  exit 1
fi
bad=()
for f in "${files[@]}"; do
  if ! "$tool" --style=file --dry-run --Werror "$f" > /dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format_check: ${#bad[@]} file(s) are not formatted: ${bad[*]}" >&2
  echo "fix with: $tool -i --style=file ${bad[*]}" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
