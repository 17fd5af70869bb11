#!/usr/bin/env bash
# install-deps.sh [--run|--test]: installs what engrams needs on a fresh
# Debian or Ubuntu machine. --run (scripts/dev.sh): what running it needs,
# the VM backends' QEMU, guest kernel and image tools. --test (the default,
# scripts/test.sh): that and what the tests need (test images' tools, a
# browser, agent CLIs, the dashboard's packages). Idempotent: packages
# already present are skipped and `apt-get update` runs at most once.
set -euo pipefail

mode=test
case "${1:-}" in
--run) mode=run ;;
--test | "") ;;
*)
	echo "usage: install-deps.sh [--run|--test]" >&2
	exit 2
	;;
esac

if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
export DEBIAN_FRONTEND=noninteractive

. /etc/os-release
distro="${ID:-unknown}"

# Packages every machine needs. erofs-utils: mkfs.erofs packs harness bundles
# (internal/harness), fsck.erofs extracts them in tests.
pkgs=(qemu-system-x86 qemu-utils e2fsprogs busybox-static lz4 cpio erofs-utils)

# Tasks clone their repositories with git on the coordinator (and the agent
# tests serve repositories with git http-backend).
pkgs+=(git)

if [ "$mode" = test ]; then
	# Test images (internal/image/imagetest): musl's loader and libc plus
	# musl-gcc for the Alpine-like image, debootstrap for the Debian one.
	pkgs+=(musl musl-tools debootstrap)
	# The dashboard's browser tests (internal/e2e): Debian's chromium, driven
	# by playwright-core from web/node_modules (no browser download), and a
	# font for its screenshots.
	pkgs+=(chromium fonts-dejavu-core)
	# The README's webhook recipe (internal/hookapp's test runs it).
	pkgs+=(openssl curl)
fi

# The guest kernel. The QEMU backend boots the uncompressed PVH vmlinux that
# it extracts from a distribution kernel, plus that kernel's virtio modules
# from /lib/modules/<version>.
case "$distro" in
debian)
	# Debian's cloud flavour: small, virtio drivers as modules, LZ4 payload.
	pkgs+=(linux-image-cloud-amd64)
	;;
ubuntu)
	# Ubuntu has no "cloud" flavour; linux-image-kvm is its minimal virtual
	# kernel (virtio built in, PVH capable). linux-image-virtual is the
	# fallback when the kvm flavour is not published for this release.
	if apt-cache show linux-image-kvm >/dev/null 2>&1; then
		pkgs+=(linux-image-kvm)
	else
		pkgs+=(linux-image-virtual)
	fi
	;;
*)
	echo "install-deps: unsupported distribution '$distro'; install QEMU, qemu-img," >&2
	echo "  mkfs.ext4, a static busybox and a Linux kernel with virtio drivers by hand." >&2
	exit 1
	;;
esac

# Agent CLIs for internal/modeltest: claude and codex from the npm registry,
# into the tests' cache ($ENGRAMS_TEST_CACHE, else ~/.cache/engrams-test).
# Both packages ship native binaries, so install scripts are skipped and
# Node.js only runs npm (any version that does). Keep the versions equal to
# ClaudeVersion and CodexVersion in internal/modeltest/cli.go (a test checks).
claude_version=2.1.332
codex_version=0.171.0
install_agent_clis() {
	if ! command -v npm >/dev/null 2>&1; then
		echo "install-deps: installing nodejs npm"
		$SUDO apt-get update -qq
		$SUDO apt-get install -y -qq --no-install-recommends nodejs npm
	fi
	local prefix="${ENGRAMS_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/engrams-test}/npm"
	local nm="$prefix/node_modules"
	if grep -qs "\"version\": \"$claude_version\"" "$nm/@anthropic-ai/claude-code-linux-x64/package.json" &&
		grep -qs "\"version\": \"$codex_version-linux-x64\"" "$nm/@openai/codex-linux-x64/package.json"; then
		echo "install-deps: agent CLIs present: claude $claude_version, codex $codex_version"
		return
	fi
	echo "install-deps: installing claude $claude_version and codex $codex_version into $prefix"
	mkdir -p "$prefix"
	npm install --prefix "$prefix" --no-audit --no-fund --ignore-scripts --save-exact --loglevel=error \
		"@anthropic-ai/claude-code@$claude_version" "@openai/codex@$codex_version"
}

# The dashboard's packages (web/package-lock.json): its build, its type
# generation and its browser tests' driver. Skipped when the lock is
# unchanged since the last install.
install_web() {
	local web sum
	web="$(cd "$(dirname "$0")/.." && pwd)/web"
	sum="$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)"
	if [ "$(cat "$web/node_modules/.engrams-lock" 2>/dev/null)" = "$sum" ]; then
		echo "install-deps: web/node_modules current"
		return
	fi
	echo "install-deps: npm ci in web/"
	(cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
	echo "$sum" >"$web/node_modules/.engrams-lock"
}

# Running needs neither: the dashboard's build (internal/dashboard/static.gen)
# is committed, and harnesses are fetched by the coordinator itself.
install_node_parts() {
	if [ "$mode" = test ]; then
		install_agent_clis
		install_web
	fi
}

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if [ "${#missing[@]}" -eq 0 ]; then
	echo "install-deps: all packages present: ${pkgs[*]}"
	install_node_parts
	exit 0
fi

echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

# Kernel images under /boot are mode 0600 on Ubuntu; the backend reads them
# as the host agent's user.
$SUDO chmod a+r /boot/vmlinuz-* 2>/dev/null || true
install_node_parts
echo "install-deps: done"
