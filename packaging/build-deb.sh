#!/bin/bash
# Builds the jprofd .deb from this source tree with dpkg-buildpackage and
# checks it with lintian.
#   packaging/build-deb.sh [OUTDIR]     (default: build-deb/ in the tree)
# The Debian packaging lives in packaging/debian/; the tree is copied
# (tracked and untracked-but-not-ignored files, as a fresh clone would have
# them plus local edits) to a temporary directory where it becomes debian/.
# Prints the path of the .deb on its last line. Needs the build
# dependencies (packaging/install-deps.sh) but not root.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$src/build-deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(dpkg-parsechangelog -l "$src/packaging/debian/changelog" -S Version)
cmake_version=$(sed -n 's/^project(jprofd VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
if [ "${version%%-*}" != "$cmake_version" ]; then
	echo "build-deb.sh: packaging/debian/changelog says $version, CMakeLists.txt says $cmake_version" >&2
	exit 1
fi

work=$(mktemp -d /tmp/jprofd-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
tree=$work/jprofd-$version
mkdir -p "$tree"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$src" && git ls-files -z -co --exclude-standard) |
		(cd "$src" && while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done) |
		tar -C "$src" --null -T - -cf - | tar -C "$tree" -xf -
else
	tar -C "$src" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$tree" -xf -
fi
rm -rf "$tree/debian"
cp -a "$src/packaging/debian" "$tree/debian"

echo "build-deb.sh: dpkg-buildpackage in $tree"
(cd "$tree" && dpkg-buildpackage -b -us -uc -j"$(nproc)") >"$work/build.log" 2>&1 || {
	tail -n 60 "$work/build.log" >&2
	echo "build-deb.sh: dpkg-buildpackage failed (log above)" >&2
	exit 1
}
changes=$(ls "$work"/jprofd_"$version"_*.changes)
echo "build-deb.sh: lintian"
# Findings are printed, not fatal; packaging/debian/jprofd.lintian-overrides
# explains the ones that are intended.
lintian --display-info --tag-display-limit 0 "$changes" || true
cp "$work"/*.deb "$out/"
deb=$(ls "$out"/jprofd_"$version"_*.deb)
echo "$deb"
