#!/usr/bin/env bash
# compare.sh BEFORE AFTER: dlock's bench at two commits, interleaved in one run.
#
# Builds the bench at each commit (a detached worktree each; bench/go.mod's
# replace makes each binary embed its own commit's dlock), then runs BLOCKS
# blocks, every run a short (a) uncontended G=1,16 and (b) hot-key W=$W
# separate, and prints markdown tables (compare_summary.py, next to this
# script): per side median (min–max) and after/before of the medians with
# the min–max of the per-block ratios; and, whenever a peer ran, dlock-before
# and dlock-after over the best peer's median for each of issue 21's figures.
#
# Two modes:
#  - default (PEER=rueidislock): each block runs the two binaries in ABBA
#    order (before after, after before, ...), each with `-libs dlock,$PEER`.
#    PEER is the same code in both binaries: a drift check whose
#    after/before should sit near 1.00. PEER= leaves it out.
#  - PEERS=all (redsync,redislock,rueidislock,spin-1ms,spin-5ms) or a
#    comma-separated list: each block runs dlock-before, dlock-after and every
#    peer once, one bench process each (peers from the after binary only:
#    they are the same code in both), in an order rotated by one every block
#    and reversed every other block, so no row always runs first, last, or
#    right after another.
#
# Knobs (environment): BLOCKS (10), DUR (1s, one uncontended run), GRANTS
# (300 per hot-key run, K = GRANTS/W), W (10,100; issue 21 needs only 100),
# HARNESS: "current" (default) builds both binaries from the bench/ of the
# checkout this script runs from (its working tree), so only dlock differs
# between them: a harness change between the two commits (how runs are
# warmed up and counted) would otherwise show as a dlock change. Where that
# bench/ does not compile against a commit's dlock (an API it lacks), that
# side falls back to the commit's own bench/, with a warning. "own" always
# uses each commit's own bench/.
#
# Run time on 2 cores: a bench process takes about 6.3 s with DUR=1s W=10,100
# (4.5 s with W=100), plus about 0.5 s to start it. Default mode: 2 processes
# per block, about 13 s (PEER= about halves each process). PEERS=all: 7 per
# block, about 45 s, so issue 21's reference run (30 blocks, every library
# once per block) is about 22 minutes, or about 16 with W=100. Building the
# two binaries adds about a minute when the build cache is cold.
#
#   bench/compare.sh 224f249 cb3551c
#   BLOCKS=6 PEER= DUR=500ms bench/compare.sh HEAD~1 HEAD
#   PEERS=all BLOCKS=30 W=100 bench/compare.sh main bench   # issue 21
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE AFTER" >&2; exit 2; }
BLOCKS=${BLOCKS:-10} PEER=${PEER-rueidislock} PEERS=${PEERS:-} DUR=${DUR:-1s} GRANTS=${GRANTS:-300} W=${W:-10,100} MODES=${MODES:-separate}
[ "$PEERS" = all ] && PEERS=redsync,redislock,rueidislock,spin-1ms,spin-5ms
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/dlock-compare.XXXXXX)
declare -A commit=([before]=$(git -C "$repo" rev-parse --short "$1^{commit}") [after]=$(git -C "$repo" rev-parse --short "$2^{commit}"))
trap 'for s in before after; do git -C "$repo" worktree remove --force "$work/src-$s" 2>/dev/null || true; done; rm -f "$work"/bench-{before,after}' EXIT

HARNESS=${HARNESS:-current} harness_note=
build() { (cd "$work/src-$1/bench" && GOWORK=off go build -trimpath -buildvcs=false -o "$work/bench-$1" .); }
for s in before after; do
	git -C "$repo" worktree add -q --detach "$work/src-$s" "${commit[$s]}"
	if [ "$HARNESS" = current ]; then
		rm -rf "$work/src-$s/bench" && mkdir "$work/src-$s/bench"
		cp "$here"/go.mod "$here"/go.sum "$here"/*.go "$work/src-$s/bench/"
		if ! build "$s" 2>"$work/build-$s.log"; then
			echo "WARNING: this bench/ does not build against ${commit[$s]}'s dlock ($(grep -v '^go: downloading' "$work/build-$s.log" | tr '\n' ' ' | head -c 300)); $s uses ${commit[$s]}'s own bench/" >&2
			harness_note+=" ($s: its own bench/, this one does not build against it)"
			rm -rf "$work/src-$s/bench" && git -C "$work/src-$s" checkout -q HEAD -- bench
			build "$s"
		fi
	else
		build "$s"
	fi
done
cmp -s "$work/bench-before" "$work/bench-after" && echo "WARNING: the two binaries are identical" >&2

args=(-scenarios uncontended,hotkey -reps 1 -g 1,16 -w "$W" -modes "$MODES" -duration "$DUR" -grants "$GRANTS")
# run BLOCK SLOT BINARY LIBS: one bench process, its output in runs/BLOCK-SLOT.
run() {
	echo "[$(date +%T)] block $1/$BLOCKS: $2 ($4${5:+, $5})" >&2
	"$work/bench-$3" -libs "$4" "${args[@]}" -out "$work/runs/$1-$2" 2>>"$work/bench.log" ||
		echo "  exit $? (problems: see $work/runs/$1-$2/RESULTS.md)" >&2
}
load_start=$(cut -d' ' -f1-3 /proc/loadavg) t0=$SECONDS
if [ -z "$PEERS" ]; then
	for ((p = 1; p <= BLOCKS; p++)); do
		order="before after"; ((p % 2)) || order="after before"
		for s in $order; do run "$p" "$s" "$s" "dlock${PEER:+,$PEER}" "${commit[$s]}"; done
	done
	what="$BLOCKS ABBA blocks per side${PEER:+, control peer $PEER in every run}"
else
	IFS=, read -ra peers <<<"$PEERS"
	slots=(before after "${peers[@]/#/peer_}")
	n=${#slots[@]}
	for ((p = 1; p <= BLOCKS; p++)); do
		order=()
		for ((i = 0; i < n; i++)); do order+=("${slots[((p - 1 + i) % n)]}"); done
		if ((p % 2 == 0)); then # reversed: before and after swap places too
			for ((i = 0, j = n - 1; i < j; i++, j--)); do t=${order[i]} order[i]=${order[j]} order[j]=$t; done
		fi
		for s in "${order[@]}"; do
			case $s in
			before | after) run "$p" "$s" "$s" dlock "${commit[$s]}" ;;
			*) run "$p" "$s" after "${s#peer_}" ;;
			esac
		done
	done
	what="$BLOCKS interleaved blocks, each running dlock-before, dlock-after and every peer ($PEERS) once, rotated"
fi

echo "### ${commit[before]} → ${commit[after]}: $what"
echo
echo "harness: $HARNESS$harness_note; \`${args[*]}\`; load average $load_start at start, $(cut -d' ' -f1-3 /proc/loadavg) at end; $((SECONDS - t0)) s; raw: $work/runs"
echo
python3 "$here/compare_summary.py" "$work/runs"
