#!/bin/bash
# Installs everything needed to build and test jprofd on Debian 12.
# Idempotent and non-interactive; must run as root.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps.sh: must be run as root (try: sudo $0)" >&2
	exit 1
fi
if [ ! -r /etc/debian_version ]; then
	echo "install-deps.sh: warning: this is not Debian; package names are Debian 12's" >&2
fi

export DEBIAN_FRONTEND=noninteractive

packages=(
	build-essential g++ cmake pkg-config   # toolchain
	clang llvm bpftool                     # BPF objects and skeletons
	libclang-rt-dev                        # libFuzzer + sanitizer runtimes for clang (tests/fuzz)
	libbpf-dev libelf-dev zlib1g-dev       # sampler, symbols
	libdw-dev                              # unwind tables from .eh_frame (elfutils CFI)
	libssl-dev                             # SHA-256 (libcrypto) keys of the unwind table cache
	libdebuginfod-dev debuginfod           # debug files from debuginfod servers; a server for its test
	libjson-c-dev libsystemd-dev libiberty-dev
	check                                  # unit tests
	openjdk-17-jdk-headless                # the agent's jni.h/jvmti.h; javac, jcmd, jfr for the JVM tests
	protobuf-c-compiler libprotobuf-c-dev  # pprof output (zlib1g-dev above gzips it)
	golang-go chromium                     # format consumers: go tool pprof, headless Chromium
	libmicrohttpd-dev prometheus           # HTTP listener; its consumers: prometheus, promtool
	python3 util-linux binutils            # integration tests: setpriv, strip/objcopy
	bindfs                                 # integration test: a binary on FUSE (test_dwarf_unwind)
	dpkg-dev debhelper fakeroot lintian    # the .deb (packaging/build-deb.sh)
	debootstrap systemd-container procps   # system test: Debian 12 root booted by systemd-nspawn (pgrep)
)

# The browser test drives Chromium from node (playwright-core, tests/browser).
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)

echo "install-deps.sh: apt-get update"
apt-get update -q
echo "install-deps.sh: installing ${packages[*]}"
apt-get install -y -q --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	"${packages[@]}"
echo "install-deps.sh: done"
