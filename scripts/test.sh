#!/usr/bin/env bash
# Run every test the way CI does: install what testing needs (QEMU, the guest
# kernel, image tools, chromium, agent CLIs, web/'s packages; PostgreSQL if
# none answers), build the binaries, then
# go vet and go test over the whole module, then each fuzz test briefly
# (scripts/fuzz.sh). Extra arguments go to go test.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
./scripts/install-deps.sh --test
. ./scripts/postgres.sh   # exports ENGRAMS_TEST_POSTGRES
echo "== build"
CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/...
echo "== vet"
go vet ./...
echo "== test"
# One package at a time: the VM tests run real guests under software
# emulation on small machines (at most two guests at once), and their
# timings must not depend on what other packages do meanwhile.
go test -p 1 -count=1 -timeout 30m "$@" ./...
echo "== fuzz"
./scripts/fuzz.sh
echo "== all tests passed in $(( $(date +%s) - start ))s"
