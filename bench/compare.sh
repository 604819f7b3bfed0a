#!/usr/bin/env bash
# compare.sh BEFORE AFTER: dlock's bench at two commits, interleaved in one run.
#
# Builds the bench at each commit (a detached worktree each; bench/go.mod's
# replace makes each binary embed its own commit's dlock), then runs the two
# binaries alternately (before after after before before after ...), BLOCKS each, every
# run a short (a) uncontended G=1,16 and (b) hot-key W=10,100 separate. Prints
# a markdown table: per-side median (min–max), and after/before of the medians
# with the min–max of the per-pair ratios (pair = one adjacent AB or BA).
#
# PEER (a lib that is the same code in both binaries) runs in every block as
# a drift check: its ratios should sit near 1.00. About 13 s per run on 2
# cores with the defaults (PEER=; halves it).
#
#   bench/compare.sh 224f249 cb3551c
#   BLOCKS=6 PEER= DUR=500ms bench/compare.sh HEAD~1 HEAD
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE AFTER" >&2; exit 2; }
BLOCKS=${BLOCKS:-10} PEER=${PEER-rueidislock} DUR=${DUR:-1s} GRANTS=${GRANTS:-300}
repo=$(cd "$(dirname "$0")/.." && git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/dlock-compare.XXXXXX)
declare -A commit=([before]=$(git -C "$repo" rev-parse --short "$1^{commit}") [after]=$(git -C "$repo" rev-parse --short "$2^{commit}"))
trap 'for s in before after; do git -C "$repo" worktree remove --force "$work/src-$s" 2>/dev/null || true; done; rm -f "$work"/bench-{before,after}' EXIT

for s in before after; do
	git -C "$repo" worktree add -q --detach "$work/src-$s" "${commit[$s]}"
	(cd "$work/src-$s/bench" && GOWORK=off go build -buildvcs=false -o "$work/bench-$s" .)
done
cmp -s "$work/bench-before" "$work/bench-after" && echo "WARNING: the two binaries are identical" >&2

args=(-libs "dlock${PEER:+,$PEER}" -scenarios uncontended,hotkey -reps 1 -g 1,16 -w 10,100
	-modes separate -duration "$DUR" -grants "$GRANTS")
load_start=$(cut -d' ' -f1-3 /proc/loadavg) t0=$SECONDS
for ((p = 1; p <= BLOCKS; p++)); do
	order="before after"; ((p % 2)) || order="after before"
	for s in $order; do
		echo "[$(date +%T)] pair $p/$BLOCKS: $s (${commit[$s]})" >&2
		"$work/bench-$s" "${args[@]}" -out "$work/runs/$p-$s" 2>>"$work/bench.log" ||
			echo "  exit $? (problems: see $work/runs/$p-$s/RESULTS.md)" >&2
	done
done

echo "### ${commit[before]} → ${commit[after]}: $BLOCKS ABBA blocks per side"
echo
echo "\`${args[*]}\`; load average $load_start at start, $(cut -d' ' -f1-3 /proc/loadavg) at end; $((SECONDS - t0)) s; raw: $work/runs"
echo
python3 - "$work/runs" <<'EOF'
import glob, json, os, statistics as st, sys
vals = {}  # (figure, lib) -> side -> pair -> value
def put(fig, lib, side, p, v):
    vals.setdefault((fig, lib), {}).setdefault(side, {})[p] = v
for f in sorted(glob.glob(sys.argv[1] + "/*/results.json")):
    p, side = os.path.basename(os.path.dirname(f)).split("-")
    r = json.load(open(f))
    for g in r.get("uncontended") or []:
        for run in g["runs"]:
            if g["goroutines"] == 1:
                put("1a G=1 pair p50 µs", g["lib"], side, p, run["pair_p50_us"])
                put("1b G=1 pair p50 in PINGs (same run)", g["lib"], side, p, run["pair_p50_in_pings"])
            put(f"2 G={g['goroutines']} pairs/s", g["lib"], side, p, run["pairs_per_s"])
    for g in r.get("hotkey") or []:
        for run in g["runs"]:
            put(f"3 W={g['w']} Redis CPU µs/grant", g["lib"], side, p, run["redis_cpu_per_grant_us"])
            put(f"4 W={g['w']} gap p50 ms", g["lib"], side, p, run["gap_p50_ms"])
            put(f"5 W={g['w']} cmds/grant", g["lib"], side, p, run["cmds_per_grant"])
    for prob in r.get("problems") or []:
        print(f"- run {p}-{side}: {prob}")
fmt = lambda x: f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.3f}"
print("| figure | lib | before median (min–max) | after median (min–max) | after/before (pairs min–max) | n |")
print("|---|---|---|---|---|---|")
for (fig, lib), s in sorted(vals.items(), key=lambda kv: (kv[0][0], kv[0][1] != "dlock", kv[0][1])):
    if "before" not in s or "after" not in s:
        continue
    b, a = list(s["before"].values()), list(s["after"].values())
    pr = [s["after"][p] / s["before"][p] for p in s["after"] if p in s["before"] and s["before"][p]]
    cell = lambda xs: f"{fmt(st.median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"
    rng = f" ({min(pr):.2f}–{max(pr):.2f})" if pr else ""
    print(f"| {fig.split(' ', 1)[1]} | {lib} | {cell(b)} | {cell(a)} | **{st.median(a) / st.median(b):.3f}**{rng} | {len(b)}/{len(a)} |")
EOF
