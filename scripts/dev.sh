#!/usr/bin/env bash
# Set up and run engrams on this machine: install what running it needs (the
# VM backends' packages, not the tests'), build the binaries into bin/, and
# start `engrams dev` (coordinator + host + embedded SQLite). Extra arguments
# go to `engrams dev`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; then
  ./scripts/install-deps.sh --run
fi
echo "building bin/engrams, bin/engrams-guest, bin/engrams-init ..."
CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/...
exec bin/engrams dev "$@"
