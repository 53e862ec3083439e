#!/bin/bash
# System test: the .deb in a booted Debian 12 with a real systemd as PID 1.
#
# Builds the .deb (packaging/build-deb.sh), makes a minimal bookworm root
# with debootstrap (cached as a tarball, see below), boots it with
# systemd-nspawn --boot and, inside, as an administrator would:
#   - apt install ./jprofd_*.deb: group jprof exists, jprofd.socket is
#     enabled and listening, jprofd.service is not running;
#   - the first `jprofctl status` (as a normal user) starts the service
#     through the socket;
#   - the journal shows the daemon's READY notification ("Started ..." comes
#     only after READY=1 for Type=notify) and its STATUS= text;
#   - systemctl stop / start jprofd; is-active says active;
#   - `jprofctl record --pid <busy loop of that user> -d 2s` returns samples;
#     `record --all` as that user is denied;
#   - a JVM of that user (openjdk-17-jre-headless in the root; the workload
#     tests/java/SpinRead.java is compiled on the host): `jprofctl record
#     --pid <it> --java require` as that user returns the Java frames of its
#     CPU-bound thread, and for its file-reading thread stacks that go
#     Java (SpinRead.readFile) -> native (libjava readBytes, libc read) ->
#     kernel (ksys_read/vfs_read);
#   - the debuginfod drop-in of docs/operations.md: with it (and a
#     debuginfod on the container's loopback), a stripped program's
#     functions are named and the debug file lands in /var/cache/jprofd;
#   - systemctl stop jprofd: result success, not failed, and every BPF
#     program the daemon held is gone from the kernel;
#   - systemd-analyze verify of the installed units is clean, and
#     systemd-analyze security prints its score (for docs/operations.md).
# The container is always torn down (trap), also on failure or timeout.
# Everything that happens asynchronously (boot, journal lines, the JVM
# getting ready) is waited for with a deadline, never with a fixed sleep;
# systemctl stop itself returns only once the unit has stopped.
#
# Must run as root. Exit 0 pass, 1 fail, 77 skip (only when this machine
# cannot run it at all: no BTF, or no namespaces; the reason is printed).
#
# Environment:
#   JPROF_SOURCE_DIR        source tree (default: two levels up)
#   JPROF_NSPAWN_CACHE      cache directory (default /var/cache/jprofd-tests)
#   JPROF_NSPAWN_NO_CACHE=1 ignore and do not write the cache (from nothing)
#   JPROF_NSPAWN_MIRROR     Debian mirror (default http://deb.debian.org/debian)
#   JPROF_NSPAWN_KEEP=1     keep the work directory for inspection
set -uo pipefail

SKIP=77
T0=$SECONDS
log() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*"; }
fail() {
	log "FAIL: $*"
	exit 1
}
skip() {
	log "SKIP: $*"
	exit $SKIP
}

src=${JPROF_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cache=${JPROF_NSPAWN_CACHE:-/var/cache/jprofd-tests}
mirror=${JPROF_NSPAWN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
user=tester

[ "$(id -u)" -eq 0 ] || skip "must run as root (debootstrap, systemd-nspawn, BPF)"
[ -r /sys/kernel/btf/vmlinux ] || skip "no /sys/kernel/btf/vmlinux: jprofd cannot load its BPF program on this kernel"
if ! unshare --mount --pid --uts --ipc --fork true 2>/dev/null; then
	skip "cannot create mount/pid/uts/ipc namespaces here (nested sandbox?), so no container can boot"
fi
for tool in systemd-nspawn debootstrap dpkg-buildpackage lintian nsenter flock bpftool; do
	command -v "$tool" >/dev/null || fail "$tool is missing: run packaging/install-deps.sh"
done
# The host's JDK 17 compiles the workload (as tests/java/workloads.cmake does).
javac=/usr/lib/jvm/java-17-openjdk-amd64/bin/javac
[ -x "$javac" ] || javac=$(command -v javac) || fail "no javac on this host (the build needs one too)"

# wait_until SECONDS CMD...: runs CMD every 0.2 s until it succeeds (0) or
# SECONDS have passed (1).
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

work=$(mktemp -d /var/tmp/jprofd-nspawn.XXXXXX)
root=$work/root
nspawn_pid=
leader=
dbgsrv_pid=

teardown() {
	local rc=$?
	trap - EXIT INT TERM
	[ -n "$dbgsrv_pid" ] && kill "$dbgsrv_pid" 2>/dev/null
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		log "teardown: stopping the container (nspawn pid $nspawn_pid)"
		# nspawn turns SIGTERM into an orderly shutdown of the container's systemd.
		kill -TERM "$nspawn_pid" 2>/dev/null
		for _ in $(seq 1 100); do
			kill -0 "$nspawn_pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$nspawn_pid" 2>/dev/null; then
			log "teardown: container did not stop in 20 s; killing it"
			kill -KILL "$nspawn_pid" 2>/dev/null
			[ -n "$leader" ] && kill -KILL "$leader" 2>/dev/null
		fi
		wait "$nspawn_pid" 2>/dev/null
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne $SKIP ] && [ -f "$work/nspawn.log" ]; then
		echo "----- container console (last 60 lines) -----"
		tail -n 60 "$work/nspawn.log"
		echo "----- end of console -----"
	fi
	# Anything nspawn left mounted below the root must not be deleted through.
	grep -o " $root[^ ]*" /proc/self/mounts 2>/dev/null | sort -r | while read -r m; do umount -l "$m"; done
	if [ "${JPROF_NSPAWN_KEEP:-0}" = 1 ]; then
		log "teardown: kept $work"
	else
		rm -rf --one-file-system "$work"
	fi
	log "total $((SECONDS - T0)) s, exit $rc"
	exit "$rc"
}
trap teardown EXIT
trap 'log "interrupted"; exit 1' INT TERM

# ---- 1. the package ----------------------------------------------------------
log "building the .deb"
deb=$("$src/packaging/build-deb.sh" "$work/deb" | tail -n 1) || fail "packaging/build-deb.sh failed"
[ -f "$deb" ] || fail "no .deb built"
log "built $(basename "$deb") ($(stat -c %s "$deb") bytes)"

# The workload, compiled on the host; the container only needs a JRE.
mkdir -p "$work/classes"
"$javac" --release 17 -g -encoding UTF-8 -Xlint:all -Werror -d "$work/classes" \
	"$src/tests/java/SpinRead.java" >"$work/javac.log" 2>&1 ||
	{ cat "$work/javac.log"; fail "javac SpinRead.java failed"; }

# ---- 2. a bookworm root, from the cache or from nothing ------------------------
# The root holds systemd, a headless JRE and every runtime dependency of the
# .deb, so that `apt install ./jprofd_*.deb` inside needs no network; the
# cache key is a hash of everything that goes into it (so a changed package
# list makes a new tarball).
deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/ //g' | grep -v '^$')
pkgs=$(printf '%s\n' systemd systemd-sysv dbus passwd openjdk-17-jre-headless $deps | sort -u | paste -sd, -)
key=$(printf 'v1 %s %s %s\n' "$suite" "$mirror" "$pkgs" | sha256sum | cut -c1-16)
tarball=$cache/$suite-$key.tar
log "root: $suite minbase + $pkgs (cache key $key)"

make_root() { # make_root DIR
	debootstrap --variant=minbase --include="$pkgs" "$suite" "$1" "$mirror" >"$work/debootstrap.log" 2>&1 || {
		tail -n 30 "$work/debootstrap.log"
		return 1
	}
	# No network in the container (--private-network): apt must not try.
	rm -f "$1"/etc/apt/sources.list
	rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*
}

mkdir -p "$root"
if [ "${JPROF_NSPAWN_NO_CACHE:-0}" = 1 ]; then
	log "debootstrap from nothing (cache disabled)"
	make_root "$root" || fail "debootstrap failed"
else
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock -w 900 9 || fail "cache lock $cache/.lock busy for 15 min"
	if [ ! -s "$tarball" ]; then
		log "debootstrap from nothing (no $tarball yet)"
		make_root "$root" || fail "debootstrap failed"
		tar -C "$root" --numeric-owner -cf "$tarball.tmp" . || fail "cannot write $tarball.tmp"
		mv "$tarball.tmp" "$tarball"
		find "$cache" -maxdepth 1 -name "$suite-*.tar" ! -name "$(basename "$tarball")" -delete
		log "cached as $tarball ($(du -h "$tarball" | cut -f1))"
	else
		log "root from the cache: $tarball"
		tar -C "$root" --numeric-owner -xf "$tarball" || fail "cannot unpack $tarball"
	fi
	flock -u 9
	exec 9>&-
fi
cp "$deb" "$root/root/" || fail "cannot copy the .deb into the root"
mkdir -p "$root/opt/jprof-test" && cp "$work/classes/"*.class "$root/opt/jprof-test/" &&
	chmod -R a+rX "$root/opt/jprof-test" || fail "cannot copy the workload into the root"
echo "jprofd-test" >"$root/etc/hostname"

# ---- 3. boot it ------------------------------------------------------------------
# jprofd needs, beyond nspawn's default capability set: CAP_BPF and
# CAP_PERFMON (BPF programs, perf events), CAP_SYSLOG (real addresses in
# /proc/kallsyms for kernel frames) and CAP_CHECKPOINT_RESTORE
# (/proc/PID/map_files), and the bpf() and perf_event_open() system calls,
# which nspawn's seccomp filter otherwise denies. See docs/operations.md.
log "booting the container"
systemd-nspawn -D "$root" --boot --register=no --keep-unit --private-network \
	--machine="jprofd-test-$$" \
	--capability=CAP_BPF,CAP_PERFMON,CAP_SYSLOG,CAP_CHECKPOINT_RESTORE \
	--system-call-filter="bpf perf_event_open" \
	</dev/null >"$work/nspawn.log" 2>&1 &
nspawn_pid=$!

# The container's PID 1 is the child of nspawn whose command is systemd.
for _ in $(seq 1 150); do
	for c in $(pgrep -P "$nspawn_pid"); do
		if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = systemd ]; then
			leader=$c
		fi
	done
	[ -n "$leader" ] && break
	kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited"
	sleep 0.2
done
[ -n "$leader" ] || fail "no systemd inside the container after 30 s"

# in_ct CMD...: runs CMD inside the container as root.
in_ct() {
	nsenter -t "$leader" -m -u -i -n -p -C -r -w -- \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root SYSTEMD_PAGER= "$@"
}
# as_user CMD...: runs CMD inside the container as the test user.
as_user() {
	in_ct runuser -u "$user" -- "$@"
}
# jprofd's journal of this boot. journald writes a line some time after
# the daemon (or PID 1) logged it, so checks wait for lines with
# wait_until ... journal_has.
journal() {
	in_ct journalctl -u jprofd.service -b --no-pager -o short-monotonic 2>&1
}
# journal_has REGEX: some line of journal matches the extended REGEX.
journal_has() {
	journal | grep -Eq -- "$1"
}

# Until PID 1's private bus exists, systemctl cannot connect at all.
for _ in $(seq 1 100); do
	state=$(in_ct timeout 120 systemctl is-system-running --wait 2>&1)
	case $state in
	*"Failed to connect"*) sleep 0.3 ;;
	*) break ;;
	esac
done
log "container systemd (host pid $leader): $state"
case $state in
running) ;;
degraded) in_ct systemctl --failed --no-legend ;;
*) fail "container did not finish booting: $state" ;;
esac

# ---- 4. install ------------------------------------------------------------------
log "apt install ./$(basename "$deb")"
in_ct apt-get install -y -q "./root/$(basename "$deb")" >"$work/apt.log" 2>&1 ||
	{ cat "$work/apt.log"; fail "apt install of the .deb failed"; }
in_ct getent group jprof >/dev/null || fail "group jprof was not created (sysusers.d)"
# The JVM agent, where every JVM (any user) can read it, and what jprofd loads by default.
agent=/usr/lib/x86_64-linux-gnu/jprofd/libjprofagent.so
in_ct runuser -u nobody -- test -r "$agent" || fail "$agent missing or not readable by every user"
in_ct /usr/sbin/jprofd --check-config 2>&1 | grep -c "agent = $agent" >/dev/null ||
	fail "jprofd's default agent path is not $agent: $(in_ct /usr/sbin/jprofd --check-config 2>&1)"
[ "$(in_ct systemctl is-enabled jprofd.socket)" = enabled ] || fail "jprofd.socket is not enabled after install"
[ "$(in_ct systemctl is-active jprofd.socket)" = active ] || fail "jprofd.socket is not listening after install"
[ "$(in_ct systemctl is-active jprofd.service)" = inactive ] ||
	fail "jprofd.service runs right after install; only the socket should"
in_ct test -S /run/jprofd/jprofd.sock || fail "no socket at /run/jprofd/jprofd.sock"
[ "$(in_ct stat -c %a /run/jprofd/jprofd.sock)" = 666 ] || fail "socket is not world-connectable"
in_ct useradd --create-home --shell /bin/sh "$user" || fail "useradd $user"
log "installed: group jprof, socket enabled and listening, service inactive"

out=$(in_ct systemd-analyze verify --man=no jprofd.socket jprofd.service 2>&1) ||
	fail "systemd-analyze verify failed: $out"
[ -z "$out" ] || fail "systemd-analyze verify is not clean:
$out"
log "systemd-analyze verify: clean"

# ---- 5. socket activation: the first client starts the daemon -----------------
out=$(as_user timeout 60 jprofctl status 2>&1) || fail "jprofctl status as $user through the socket failed: $out"
printf '%s\n' "$out" | sed 's/^/    /'
[ "$(in_ct systemctl is-active jprofd.service)" = active ] || fail "the first jprofctl status did not start jprofd.service"
log "socket activation: the first jprofctl status started jprofd.service"

# READY=1: a Type=notify unit is "Started" only after it; STATUS= shows up too.
wait_until 30 journal_has 'ready on systemd sockets' || fail "no 'ready' line in the journal within 30 s:
$(journal)"
wait_until 30 journal_has 'Started (jprofd.service|jprofd system-wide eBPF profiler)' ||
	fail "the journal has no 'Started' after READY=1 within 30 s:
$(journal)"
status_text=$(in_ct systemctl show -p StatusText --value jprofd.service)
case $status_text in
"Sampling at 19 Hz"*) ;;
*) fail "StatusText is \"$status_text\", want the daemon's STATUS= (\"Sampling at 19 Hz, ...\")" ;;
esac
log "journal: READY seen ('Started' after 'ready on systemd sockets'); STATUS=\"$status_text\""

# ---- 6. systemctl stop / start ---------------------------------------------------
in_ct systemctl stop jprofd.service || fail "systemctl stop jprofd failed"
in_ct timeout 60 systemctl start jprofd.service || {
	in_ct journalctl -u jprofd -b --no-pager | tail -n 30
	fail "systemctl start jprofd failed"
}
[ "$(in_ct systemctl is-active jprofd.service)" = active ] || fail "systemctl is-active jprofd is not active"
mainpid=$(in_ct systemctl show -p MainPID --value jprofd.service)
log "systemctl start jprofd: active, MainPID $mainpid (container pid)"
wd=$(in_ct systemctl show -p WatchdogUSec --value jprofd.service)
log "watchdog: WatchdogUSec=$wd"

# BPF programs the daemon holds, by id (the host may run other jprofd's).
prog_ids=$(in_ct sh -c "cat /proc/$mainpid/fdinfo/* 2>/dev/null" | sed -n 's/^prog_id:[[:space:]]*//p' | sort -un | paste -sd' ' -)
[ -n "$prog_ids" ] || fail "jprofd (pid $mainpid) holds no BPF programs"
for id in $prog_ids; do
	bpftool prog show id "$id" >/dev/null 2>&1 || fail "BPF program $id held by jprofd is not in the kernel?"
done
log "jprofd holds BPF programs: $(for id in $prog_ids; do bpftool -j prog show id "$id" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p' | tr '\n' ' '; echo -n "(id $id) "; done)"

# ---- 7. record a process of the container as a normal user -------------------------
in_ct systemd-run --quiet --uid="$user" --unit=jprof-busy --property=Type=simple \
	/bin/sh -c 'while :; do :; done' || fail "cannot start the busy loop"
busy=$(in_ct systemctl show -p MainPID --value jprof-busy.service)
[ "${busy:-0}" -gt 0 ] || fail "busy loop has no pid"
rec_err=$work/record.err
profile=$(as_user timeout 60 jprofctl record --pid "$busy" -d 2s -i 10ms 2>"$rec_err")
rc=$?
[ "$rc" -eq 0 ] || fail "jprofctl record --pid $busy as $user: exit $rc: $(cat "$rec_err")"
samples=$(printf '%s\n' "$profile" | awk 'NF { n += $NF } END { print n + 0 }')
log "jprofctl record --pid $busy -d 2s as $user: $samples samples; top stacks:"
printf '%s\n' "$profile" | sort -k2 -t' ' -rn | awk '{ print $NF, $0 }' | sort -rn | cut -d' ' -f2- | head -n 5 |
	cut -c1-160 | sed 's/^/    /'
[ "$samples" -gt 0 ] || fail "the profile of pid $busy has no samples"
# Not asserted: the count (a busy loop at 10 ms for 2 s gives about 200 on
# an idle host, fewer on a loaded one). Asserted: user frames resolve, which
# inside the container's PID namespace needs the sampler to take ids in the
# daemon's own namespace.
# (Counted, not `grep -q`: with pipefail, a grep -q that stops reading
# fails the pipeline once the profile is over a pipe write.)
known=$(printf '%s\n' "$profile" | grep -vc '^\[unknown\]')
[ "${known:-0}" -gt 0 ] ||
	fail "every user frame is [unknown]: pids from BPF do not match the container's /proc"
out=$(as_user jprofctl record --all -d 1s 2>&1)
rc=$?
[ "$rc" -eq 4 ] || fail "record --all as $user: exit $rc, want 4 (permission denied): $out"
wait_until 30 journal_has 'audit: denied' || fail "no audit line for the denial in the journal within 30 s"
log "record --all as $user denied (exit 4) with an audit line"
in_ct systemctl stop jprof-busy.service || fail "systemctl stop jprof-busy.service failed"
if in_ct test -e "/proc/$busy"; then fail "busy loop (pid $busy) still runs after its unit stopped"; fi

# ---- 8. record the user's JVM: Java -> native -> kernel ------------------------------
# The flagship use: the user starts a JVM, the service (socket-activated,
# under its shipped unit) loads the agent into it on request.
in_ct test -x /usr/bin/java || fail "no java in the container root (openjdk-17-jre-headless)"
data=/home/$user/spinread.data
# SuccessExitStatus=143: a JVM stopped by SIGTERM exits 128+15 after its
# shutdown hooks, which is how this unit is meant to end.
in_ct systemd-run --quiet --uid="$user" --unit=jprof-java --property=Type=simple \
	--property=SuccessExitStatus=143 --working-directory="/home/$user" \
	/usr/bin/java -Xmx64m -XX:+UseSerialGC -cp /opt/jprof-test SpinRead 600 "$data" ||
	fail "cannot start the JVM"
jvm_ready() {
	in_ct test -e "$data.ready" && return 0
	# A JVM that died will never get ready: stop waiting.
	[ "$(in_ct systemctl is-active jprof-java.service)" = active ] || return 0
	return 1
}
wait_until 120 jvm_ready && in_ct test -e "$data.ready" ||
	fail "the JVM did not get ready in 120 s:
$(in_ct systemctl status --no-pager -n 20 jprof-java.service 2>&1)"
jvm=$(in_ct systemctl show -p MainPID --value jprof-java.service)
[ "${jvm:-0}" -gt 0 ] || fail "the JVM has no pid"
log "JVM SpinRead of $user ready: pid $jvm (container pid)"

rec_err=$work/record-jvm.err
t_rec=$SECONDS
profile=$(as_user timeout 120 jprofctl record --pid "$jvm" -d 3s -i 10ms --java require --threads \
	--format collapsed --no-progress 2>"$rec_err")
rc=$?
[ "$rc" -eq 0 ] || fail "jprofctl record --pid $jvm --java require as $user: exit $rc: $(cat "$rec_err")"
printf '%s\n' "$profile" >"$work/jvm.collapsed"
samples=$(awk 'NF { n += $NF } END { print n + 0 }' "$work/jvm.collapsed")
log "jprofctl record --pid $jvm -d 3s --java require as $user: $samples samples in $((SECONDS - t_rec)) s; top stacks:"
awk '{ print $NF, $0 }' "$work/jvm.collapsed" | sort -rn | cut -d' ' -f2- | head -n 5 |
	cut -c1-200 | sed 's/^/    /'

# stack_samples AWK_CONDITION: samples of the JVM's stacks for which the
# condition holds. It sees the frames, root to leaf, as f[1..nf], and
# after(I, REGEX): the index of the first frame past I that matches, or 0;
# kernel_from(I): whether frames I..nf are all kernel frames (_[k]).
# A Java frame is its name with _[j], _[i] or _[0], or bare when its
# execution mode is unknown (docs/formats.md).
stack_samples() {
	awk '
		function after(i, re) {
			for (i++; i <= nf; i++) if (f[i] ~ re) return i
			return 0
		}
		function kernel_from(i) {
			for (; i <= nf; i++) if (f[i] !~ /_\[k\]$/) return 0
			return 1
		}
		NF {
			n = $0; sub(/.* /, "", n)
			line = $0; sub(/ [0-9]+$/, "", line)
			nf = split(line, f, ";")
		}
		NF && ('"$1"') { total += n }
		END { print total + 0 }' "$work/jvm.collapsed"
}
# The CPU-bound thread: Java frames SpinRead.main -> SpinRead.spin.
spin=$(stack_samples '(m = after(0, "^SpinRead[.]main(_\\[[ji0]\\])?$")) && after(m, "^SpinRead[.]spin(_\\[[ji0]\\])?$")')
# The reading thread: Java frames SpinRead.readFile and the native method
# java.io.FileInputStream.readBytes, then native frames of libjava
# (readBytes) and libc (read), then the kernel's ksys_read or vfs_read, and
# from the first kernel frame on only kernel frames.
read_ok='f[1] ~ /^\[reader tid=[0-9]+\]$/ &&
	(j = after(1, "^SpinRead[.]readFile(_\\[[ji0]\\])?$")) &&
	(j = after(j, "^java[.]io[.]FileInputStream[.]readBytes(_\\[[ji0]\\])?$")) &&
	(c = after(j, "^readBytes$")) && (c = after(c, "^(__libc_read|__read|read)$")) &&
	(k = after(c, "_\\[k\\]$")) && kernel_from(k) && after(k - 1, "^(ksys_read|vfs_read)_\\[k\\]$")'
reads=$(stack_samples "$read_ok")
log "JVM profile: $spin samples main -> SpinRead.main -> SpinRead.spin; $reads samples reader -> SpinRead.readFile -> FileInputStream.readBytes -> libjava readBytes -> libc read -> ksys_read/vfs_read"
[ "$spin" -gt 0 ] || fail "no Java frames SpinRead.main -> SpinRead.spin in the main thread's stacks"
[ "$reads" -gt 0 ] || fail "no stack of the reader thread goes SpinRead.readFile -> FileInputStream.readBytes -> readBytes -> read -> ksys_read/vfs_read:
$(grep "^\[reader" "$work/jvm.collapsed" | awk "{ print \$NF, \$0 }" | sort -rn | cut -d" " -f2- | head -n 10 | cut -c1-400)"
in_ct systemctl stop jprof-java.service || fail "systemctl stop jprof-java.service failed"
[ "$(in_ct systemctl show -p Result --value jprof-java.service)" = success ] ||
	fail "the JVM's unit did not end with Result=success"
if in_ct test -e "/proc/$jvm"; then fail "the JVM (pid $jvm) still runs after its unit stopped"; fi

# ---- 9. the debuginfod drop-in of docs/operations.md ----------------------------------
# The drop-in as documented (only the server differs: Debian's `debuginfod`
# from the host, run in the container's network namespace on loopback,
# serving the debug file of a stripped program). The hardened unit has no
# network and a read-only file system without it; with it, the daemon
# fetches the debug file into its cache directory and names the stripped
# program's functions.
dbg=$work/dbgsrv
mkdir -p "$dbg"
gcc -O1 -g -fno-inline -fno-optimize-sibling-calls -I"$src/tests/progs" -o "$work/chain" \
	"$src/tests/progs/unwind_chain.c" -ldl || fail "cannot compile unwind_chain.c"
objcopy --only-keep-debug "$work/chain" "$dbg/chain.debug" || fail "objcopy --only-keep-debug"
strip --strip-all -o "$root/opt/jprof-test/chain_stripped" "$work/chain" || fail "strip"
chmod 755 "$root/opt/jprof-test/chain_stripped"
bid=$(readelf -n "$work/chain" | sed -n 's/.*Build ID: *//p')
[ -n "$bid" ] || fail "no build-id in the test program"
port=8002
nsenter -t "$leader" -n -- debuginfod -F "$dbg" -p "$port" -d "$dbg/index.sqlite" \
	>"$work/debuginfod.log" 2>&1 &
dbgsrv_pid=$!
served() {
	nsenter -t "$leader" -n -- curl -sf -o /dev/null "http://127.0.0.1:$port/buildid/$bid/debuginfo"
}
wait_until 60 served || fail "debuginfod did not serve $bid within 60 s: $(tail -n 5 "$work/debuginfod.log")"
in_ct mkdir -p /etc/systemd/system/jprofd.service.d
in_ct tee /etc/systemd/system/jprofd.service.d/debuginfod.conf >/dev/null <<CONF || fail "cannot write the drop-in"
[Service]
Environment=DEBUGINFOD_URLS=http://127.0.0.1:$port
Environment=DEBUGINFOD_CACHE_PATH=/var/cache/jprofd/debuginfod
CacheDirectory=jprofd
PrivateNetwork=no
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
IPAddressAllow=any
CONF
in_ct systemctl daemon-reload || fail "daemon-reload"
in_ct timeout 60 systemctl restart jprofd.service || {
	in_ct journalctl -u jprofd -b --no-pager | tail -n 30
	fail "systemctl restart jprofd with the debuginfod drop-in failed"
}
in_ct systemd-run --quiet --uid="$user" --unit=jprof-chain --property=Type=simple \
	/opt/jprof-test/chain_stripped chain 300 || fail "cannot start the stripped program"
chain=$(in_ct systemctl show -p MainPID --value jprof-chain.service)
[ "${chain:-0}" -gt 0 ] || fail "the stripped program has no pid"
named() {
	as_user timeout 60 jprofctl record --pid "$chain" -d 1s -i 10ms --format collapsed \
		--no-progress >"$work/chain.collapsed" 2>"$work/chain.err" || return 1
	grep -q 'main;uw_a;uw_b;uw_c' "$work/chain.collapsed"
}
wait_until 90 named || fail "the stripped program's functions were not named from debuginfod within 90 s:
$(head -c 2000 "$work/chain.collapsed"; cat "$work/chain.err")
$(journal | tail -n 15)"
in_ct test -s "/var/cache/jprofd/debuginfod/$bid/debuginfo" ||
	fail "no debug file in the daemon's cache directory: $(in_ct find /var/cache/jprofd 2>&1 | head)"
log "debuginfod drop-in: stripped program named (main;uw_a;uw_b;uw_c), debug file cached under /var/cache/jprofd"
in_ct systemctl stop jprof-chain.service
kill "$dbgsrv_pid" 2>/dev/null
wait "$dbgsrv_pid" 2>/dev/null
dbgsrv_pid=

# ---- 10. a clean stop -----------------------------------------------------------------
in_ct systemctl stop jprofd.service 2>/dev/null || fail "systemctl stop jprofd failed"
active=$(in_ct systemctl is-active jprofd.service)
result=$(in_ct systemctl show -p Result --value jprofd.service)
status=$(in_ct systemctl show -p ExecMainStatus --value jprofd.service)
[ "$active" = inactive ] || fail "after stop jprofd is $active"
[ "$result" = success ] || fail "after stop Result=$result"
[ "$status" = 0 ] || fail "jprofd exited with status $status"
if in_ct systemctl is-failed --quiet jprofd.service; then fail "jprofd.service is failed"; fi
for id in $prog_ids; do
	if bpftool prog show id "$id" >/dev/null 2>&1; then fail "BPF program $id is still loaded after stop"; fi
done
wait_until 30 journal_has 'jprofd stopped' || fail "no 'jprofd stopped' in the journal within 30 s:
$(journal | tail -n 20)"
log "systemctl stop jprofd: inactive, Result=success, exit 0, BPF programs $prog_ids gone"

# ---- 11. the exposure score, for the record -----------------------------------------
security=$(in_ct systemd-analyze security --no-pager jprofd.service 2>&1)
log "systemd-analyze security jprofd.service: $(printf '%s\n' "$security" | tail -n 1)"
log "settings it counts as exposed:"
printf '%s\n' "$security" | grep '✗' | sed 's/^/    /'

log "PASS"
exit 0
