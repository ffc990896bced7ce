#!/usr/bin/env bash
# bench-ext4.sh runs durobench on a fresh, loop-mounted ext4 image with a
# journal (mkfs.ext4's default), beside `make bench` on the default
# directory. It exists because a file system's inode allocator weighs on
# durofs, which creates a file per message and claim, and not on SQLite,
# which creates none: on ext4 without a journal (this project's VM's root
# disk) every creation in a block group with inodes freed in the last minute
# or more scans past them (BENCHMARKS.md, "Session of 2026-11-28 (midday)").
#
# Usage: scripts/bench-ext4.sh [durobench flags]      (default: -only throughput)
#        scripts/bench-ext4.sh gw [gwbench flags]     (default: -runs 3, as make bench-gw)
# Needs root (mount), mkfs.ext4 and a loop device. The image (sparse,
# $BENCH_EXT4_SIZE, default 6G) lives at $BENCH_EXT4_IMG (default
# bench/.ext4.img) and is removed on exit, as is its mount point. The report
# goes to bench/bench-report-ext4.md (gwbench prints its table).
set -euo pipefail

cd "$(dirname "$0")/.."
img=${BENCH_EXT4_IMG:-$PWD/bench/.ext4.img}
size=${BENCH_EXT4_SIZE:-6G}
go=${GO:-go}
tool=durobench
if [ "${1:-}" = gw ]; then
	tool=gwbench
	shift
fi
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
	case $tool in
	durobench) args=(-only throughput) ;;
	gwbench) args=(-runs 3) ;;
	esac
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "bench-ext4: needs root to mount a loop image" >&2
	exit 2
fi

mnt=$(mktemp -d)
mounted=
cleanup() {
	if [ -n "$mounted" ]; then umount "$mnt" || true; fi
	rmdir "$mnt" || true
	rm -f "$img"
}
trap cleanup EXIT

rm -f "$img"
truncate -s "$size" "$img"
mkfs.ext4 -q -F "$img"
mount -o loop "$img" "$mnt"
mounted=1
cd bench
case $tool in
durobench) "$go" run ./cmd/durobench -dir "$mnt/data" -out bench-report-ext4.md "${args[@]}" ;;
gwbench) mkdir "$mnt/data" && "$go" run ./cmd/gwbench -dir "$mnt/data" "${args[@]}" ;;
esac
