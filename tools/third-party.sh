#!/usr/bin/env bash
# third_party/jinja is github.com/ardanlabs/jinja v1.12.0 with third_party/jinja.patch applied
# (see third_party/jinja/KVGATE.md). This script keeps the two honest:
#   tools/third-party.sh --check   exit 1 unless the copy is upstream + the patch, file for file
#   tools/third-party.sh --diff    rewrite the patch from the copy (after editing the copy)
#   tools/third-party.sh --test    run upstream's own tests on the patched copy
set -euo pipefail
cd "$(dirname "$0")/.."
MOD=github.com/ardanlabs/jinja@v1.12.0
COPY=third_party/jinja
PATCH=third_party/jinja.patch
# Files of ours in the copy, not upstream's.
OURS=(go.mod KVGATE.md)

upstream=$(go mod download -json "$MOD" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$upstream" ] || { echo "third-party: cannot download $MOD" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The upstream files the copy carries: the library's sources and licence, not its tests.
mkdir -p "$tmp/a"
for f in "$upstream"/*; do
	case "$(basename "$f")" in
	*_test.go | go.mod | go.sum | makefile | examples | scripts | testdata) ;;
	*) cp -r "$f" "$tmp/a/" ;;
	esac
done
chmod -R u+w "$tmp/a"

case "${1:-}" in
--check)
	cp -r "$tmp/a" "$tmp/b"
	(cd "$tmp/b" && patch -s -p1 --no-backup-if-mismatch) <"$PATCH"
	for f in "${OURS[@]}"; do cp "$COPY/$f" "$tmp/b/$f"; done
	if ! diff -r "$tmp/b" "$COPY" >"$tmp/out"; then
		cat "$tmp/out" >&2
		echo "third-party: $COPY is not $MOD + $PATCH; edit the copy, then run tools/third-party.sh --diff" >&2
		exit 1
	fi
	;;
--diff)
	mkdir -p "$tmp/b"
	cp -r "$COPY"/. "$tmp/b/"
	for f in "${OURS[@]}"; do rm -f "$tmp/b/$f"; done
	# No timestamps in the file headers, so the patch is the same however often it is written.
	(cd "$tmp" && diff -ruN a b || true) | sed -E 's/^((---|\+\+\+) [^\t]+)\t.*/\1/' >"$PATCH"
	echo "third-party: wrote $PATCH ($(grep -c '^@@' "$PATCH") hunks)"
	;;
--test)
	mkdir -p "$tmp/t"
	cp -r "$upstream"/. "$tmp/t/"
	chmod -R u+w "$tmp/t"
	(cd "$tmp/t" && patch -s -p1 --no-backup-if-mismatch) <"$PATCH"
	(cd "$tmp/t" && go test -count=1 .)
	;;
*)
	echo "usage: tools/third-party.sh --check | --diff | --test" >&2
	exit 2
	;;
esac
