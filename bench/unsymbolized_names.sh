#!/bin/sh
# How many frame names unsymbolized code gets: records `xz -9` (Debian's
# stripped liblzma.so.5) with a jprofd build and counts the distinct
# liblzma.so.5 frames and samples. Run it with two builds to compare.
# Usage (root): bench/unsymbolized_names.sh BUILD_DIR [SECONDS]
set -eu
build=$1
secs=${2:-10}
dir=$(mktemp -d /tmp/jprof-bench-XXXXXX)
trap 'kill $xz $daemon 2>/dev/null || true; rm -rf "$dir"' EXIT
# Compressible, binary-like input: the host's own libraries.
cat /usr/lib/x86_64-linux-gnu/*.so* 2>/dev/null | head -c 300000000 > "$dir/in"
"$build/jprofd" --socket "$dir/sock" --rate 99 2> "$dir/daemon.log" &
daemon=$!
for _ in $(seq 50); do [ -S "$dir/sock" ] && break; sleep 0.1; done
xz -9 -T1 -c "$dir/in" > /dev/null &
xz=$!
sleep 1
"$build/jprofctl" --socket "$dir/sock" record --pid $xz -d "${secs}s" -o "$dir/xz.collapsed" > /dev/null
"$build/jprofctl" --socket "$dir/sock" record --pid $xz -d "${secs}s" -o "$dir/xz.pb.gz" > /dev/null
awk '{ n = $NF; $NF = ""; split($0, f, ";");
       for (i in f) if (f[i] ~ /^liblzma\.so\.5/) { names[f[i]] = 1; s += n; break } ;
       total += n }
     END { c = 0; for (k in names) c++;
           printf "liblzma frames: %d distinct names, %d of %d samples\n", c, s, total }' "$dir/xz.collapsed"
echo "hottest liblzma frames:"
grep -o 'liblzma[^;]*' "$dir/xz.collapsed" | sort | uniq -c | sort -rn | head -5
HOME=$dir go tool pprof -top -nodecount=8 "$dir/xz.pb.gz" 2>/dev/null | sed -n '1,16p'
