#!/usr/bin/env bash
# install-versitygw.sh: builds the versitygw S3 gateway that the blob/s3
# conformance tests run as a real S3 server on 127.0.0.1. Idempotent: the
# binary lands in a cache directory and is rebuilt only when missing.
#
#   ENGRAMS_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/engrams)
#
# Prints the binary's path; point tests at it with
#   export ENGRAMS_VERSITYGW="$(scripts/install-versitygw.sh)"
set -euo pipefail

version="v1.8.0"
cache="${ENGRAMS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/engrams}"
bindir="$cache/versitygw-$version"
bin="$bindir/versitygw"

if [ ! -x "$bin" ]; then
	mkdir -p "$bindir"
	echo "install-versitygw: building versitygw $version into $bindir" >&2
	# Outside any module, so the project's go.mod is never touched.
	(cd "$bindir" && GOFLAGS= GOBIN="$bindir" go install "github.com/versity/versitygw/cmd/versitygw@$version")
fi
echo "$bin"
