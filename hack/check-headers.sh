#!/usr/bin/env bash
# Every Go file of the repository (tracked, or new and not ignored) starts with the license
# header of hack/boilerplate.go.txt, after a build constraint and a blank line when it has one
# (`make vet` runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
files=()
while IFS= read -r f; do
  [ -f "$f" ] && files+=("$f") # not deleted in the work tree
done < <(git ls-files --cached --others --exclude-standard -- '*.go')
missing=$(awk -v header=hack/boilerplate.go.txt '
  BEGIN { while ((getline line < header) > 0) want[++n] = line }
  FNR == 1 { if (name != "" && !ok) print name; name = FILENAME; ok = 0; skip = 0; i = 0
             if ($0 ~ /^\/\/go:build /) { skip = 2 } }
  skip > 0 { skip--; next }
  !ok && i < n { if ($0 != want[++i]) { i = n + 1 } else if (i == n) { ok = 1 } }
  END { if (name != "" && !ok) print name }
' "${files[@]}")
if [ -n "$missing" ]; then
  echo "these Go files lack the license header of hack/boilerplate.go.txt (put it first, after any //go:build line and a blank line):"
  printf '  %s\n' $missing
  exit 1
fi
