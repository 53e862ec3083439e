#!/bin/sh
# The cost of the sampler's self-timing per sample (bench/bpf_timing_micro.bpf.c):
# average duration of the `timed` and `bare` programs over BENCH_REPEAT runs
# each (BPF_PROG_TEST_RUN), ROUNDS times, alternating. Needs root, clang and
# bpftool; pins in a bpffs of its own (a private mount namespace).
#   sudo bench/bpf_timing_micro.sh            # 5 rounds of 1,000,000 runs
set -eu
[ "${JPROF_MICRO_NS:-}" ] || JPROF_MICRO_NS=1 exec unshare -m --propagation private "$0" "$@"
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-5}
repeat=${BENCH_REPEAT:-1000000}
work=$(mktemp -d /var/tmp/jprof-micro.XXXXXX)
pin=$work/bpffs
mkdir "$pin"
mount -t bpf bpf "$pin"
trap 'umount "$pin" 2>/dev/null || true; rm -rf "$work"' EXIT
clang -O2 -g -target bpf -I"$here/../bpf" -I/usr/include/"$(gcc -print-multiarch)" \
	-c "$here/bpf_timing_micro.bpf.c" -o "$work/micro.o"
bpftool prog loadall "$work/micro.o" "$pin/progs" type socket
head -c 64 /dev/zero >"$work/pkt"
avg() {  # program -> average ns per run
	bpftool prog run pinned "$pin/progs/$1" data_in "$work/pkt" repeat "$repeat" 2>&1 |
		sed -n 's/.*duration (average): \([0-9]*\)ns.*/\1/p'
}
i=0
while [ "$i" -lt "$rounds" ]; do
	b=$(avg bare); t=$(avg timed)
	echo "round $((i + 1)): bare ${b} ns, timed ${t} ns, timing adds $((t - b)) ns per run"
	i=$((i + 1))
done
