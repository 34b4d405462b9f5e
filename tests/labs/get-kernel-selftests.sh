#!/bin/bash
# Fetch the kernel's SRv6 lab scripts (tools/testing/selftests/net/srv6_*.sh
# and what they source) from Debian's linux-source package, unchanged:
#
#   tests/labs/get-kernel-selftests.sh [DEST]     (default /usr/local/share/fastpath:
#   the VM of python -m fastpath.kernel vm sees it; its /var/cache is its own)
#
# They land in DEST/selftests-VERSION/ with the kernel's COPYING and
# LICENSES/preferred/GPL-2.0 (the scripts are GPL-2.0), and VERSION names
# the package version they came from; DEST/selftests is a link to the
# newest.  The package is the one of the kernel the VM boots
# (linux-image-6.12-amd64), so the labs match their judge.  Needs apt
# access to Debian's archive; about 150 MB are downloaded and dropped.
set -euo pipefail
dest=${1:-/usr/local/share/fastpath}
pkg=${FASTPATH_SELFTESTS_PACKAGE:-linux-source-6.12}
candidate() { apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
version=$(candidate)
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
	apt-get update -qq >/dev/null 2>&1 || true
	version=$(candidate)
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
	echo "get-kernel-selftests: apt knows no $pkg (apt-get update?)" >&2
	exit 2
fi
upstream=${version%%-*}
out=$dest/selftests-$upstream
if [ -f "$out/VERSION" ] && [ "$(cat "$out/VERSION")" = "$pkg $version" ]; then
	ln -sfn "selftests-$upstream" "$dest/selftests"
	echo "$out: already there ($pkg $version)"
	exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q "$pkg=$version" >/dev/null 2>&1)
deb=$(ls "$work"/*.deb)
top=linux-source-${upstream%.*}
mkdir -p "$work/x"
dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/$top.tar.xz" | tar -xJ -C "$work/x" \
	--wildcards "$top/tools/testing/selftests/net/srv6_*" \
	"$top/tools/testing/selftests/net/lib.sh" \
	"$top/tools/testing/selftests/kselftest/ktap_helpers.sh" \
	"$top/COPYING" "$top/LICENSES/preferred/GPL-2.0"
echo "$pkg $version" > "$work/x/$top/VERSION"
mkdir -p "$dest"
rm -rf "$out"
mv "$work/x/$top" "$out"
ln -sfn "selftests-$upstream" "$dest/selftests"
echo "$out: $(ls "$out"/tools/testing/selftests/net/srv6_*.sh | wc -l) lab scripts ($pkg $version)"
