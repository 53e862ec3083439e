#!/bin/bash
# From a fresh Debian 12 to a running jprofd: installs the build
# dependencies, builds in build/, installs under /usr/local and runs jprofd
# in the foreground on the default socket. Must run as root.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
	echo "quickstart.sh: must be run as root: jprofd loads BPF programs (try: sudo $0)" >&2
	exit 1
fi

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$src"

"$src/packaging/install-deps.sh"

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr/local \
	-DJPROF_TESTS=OFF
cmake --build build -j"$(nproc)"
cmake --install build

install -d -m 0755 /run/jprofd

cat <<'HINT'

jprofd is installed in /usr/local and starts now in the foreground
(Ctrl-C stops it). From another terminal, as any user:

    jprofctl status
    jprofctl record --pid <PID> -d 10s -o profile.collapsed

(you may profile your own processes; root or group jprof may profile all,
 e.g. sudo jprofctl record --all -d 10s -o host.collapsed)

HINT
exec /usr/local/sbin/jprofd --socket /run/jprofd/jprofd.sock
