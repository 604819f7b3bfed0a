#!/usr/bin/env python3
"""compare_summary.py RUNS: the tables of compare.sh, from its run directories.

RUNS holds one directory per bench invocation, named BLOCK-SLOT, each with
the results.json that invocation wrote. SLOT is "before" or "after" (the
dlock binary at that commit; in the default mode it also ran the control
peer) or "peer_NAME" (PEERS mode: one peer, run by the after binary).

Prints two markdown tables:
  1. per figure and lib: before and after median (min–max) over blocks, and
     after/before of the medians with the min–max of the per-block ratios;
  2. "vs the best peer": for each of issue 21's figures, dlock-before and
     dlock-after over the best peer's median (the best chosen per figure and
     per side of the comparison it asks for), with the min–max of the
     per-block ratios against that same peer.
"""
import glob
import json
import os
import statistics as st
import sys

# Peers of figure 2's "best go-redis peer": the rows built on go-redis.
GO_REDIS_PEERS = ("redsync", "redislock", "spin-1ms", "spin-5ms")


def load(runs):
    """Returns vals[(figure, lib)][side][block] = value, and the problems."""
    vals, problems = {}, []

    def put(fig, lib, side, p, v):
        # Several runs of one lib in one block and side (not made by
        # compare.sh today) would be averaged, not overwritten.
        cell = vals.setdefault((fig, lib), {}).setdefault(side, {})
        cell.setdefault(p, []).append(v)

    for f in sorted(glob.glob(os.path.join(runs, "*", "results.json"))):
        p, slot = os.path.basename(os.path.dirname(f)).split("-", 1)
        side = slot.split("_", 1)[0]  # before, after or peer
        r = json.load(open(f))
        for g in r.get("uncontended") or []:
            G = g["goroutines"]
            for run in g["runs"]:
                if G == 1:
                    put("1a G=1 pair p50 µs", g["lib"], side, p, run["pair_p50_us"])
                    if run.get("pair_p50_in_pings"):
                        put("1b G=1 pair p50 in PINGs (same run)", g["lib"], side, p, run["pair_p50_in_pings"])
                put(f"2 G={G} pairs/s", g["lib"], side, p, run["pairs_per_s"])
                put(f"6 G={G} Redis CPU µs/pair", g["lib"], side, p, run["redis_cpu_per_pair_us"])
                if run.get("client_cpu_per_pair_us"):
                    put(f"6b G={G} client CPU µs/pair", g["lib"], side, p, run["client_cpu_per_pair_us"])
        for g in r.get("hotkey") or []:
            if g.get("mode", "separate") == "shared":
                # MODES=shared: goroutines of one Client (issue 30's cohort).
                for run in g["runs"]:
                    put(f"7 W={g['w']} shared Redis CPU µs/grant", g["lib"], side, p, run["redis_cpu_per_grant_us"])
                    put(f"8 W={g['w']} shared gap p50 ms", g["lib"], side, p, run["gap_p50_ms"])
                    put(f"9 W={g['w']} shared cmds/grant", g["lib"], side, p, run["cmds_per_grant"])
                continue
            for run in g["runs"]:
                put(f"3 W={g['w']} Redis CPU µs/grant", g["lib"], side, p, run["redis_cpu_per_grant_us"])
                put(f"4 W={g['w']} gap p50 ms", g["lib"], side, p, run["gap_p50_ms"])
                put(f"5 W={g['w']} cmds/grant", g["lib"], side, p, run["cmds_per_grant"])
        for prob in r.get("problems") or []:
            problems.append(f"run {p}-{slot}: {prob}")
    for s in vals.values():
        for side in s:
            s[side] = {p: st.mean(xs) for p, xs in s[side].items()}
    return vals, problems


def fmt(x):
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.3f}"


def cell(xs):
    return f"{fmt(st.median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"


def before_after_table(vals):
    out = ["| figure | lib | before median (min–max) | after median (min–max) | after/before (blocks min–max) | n |",
           "|---|---|---|---|---|---|"]
    for (fig, lib), s in sorted(vals.items(), key=lambda kv: (kv[0][0], kv[0][1] != "dlock", kv[0][1])):
        if "before" not in s or "after" not in s:
            continue
        b, a = list(s["before"].values()), list(s["after"].values())
        pr = [s["after"][p] / s["before"][p] for p in s["after"] if p in s["before"] and s["before"][p]]
        rng = f" ({min(pr):.2f}–{max(pr):.2f})" if pr else ""
        ratio = st.median(a) / st.median(b) if st.median(b) else float("nan")
        out.append(f"| {fig.split(' ', 1)[1]} | {lib} | {cell(b)} | {cell(a)} | **{ratio:.3f}**{rng} | {len(b)}/{len(a)} |")
    return out


def peer_values(vals, fig, lib):
    """A peer's value per block, whichever binary ran it (the peers are the
    same code in both): the mean of its runs in that block."""
    by_block = {}
    for side, xs in vals.get((fig, lib), {}).items():
        for p, v in xs.items():
            by_block.setdefault(p, []).append(v)
    return {p: st.mean(v) for p, v in by_block.items()}


def best_peer(vals, fig, candidates, higher_better):
    """The candidate peer with the best median over blocks: (name, per-block
    values), or None when none of them ran. Ties go to the first name in
    sorted order, so the choice does not depend on the run order."""
    best = None
    for lib in sorted(candidates):
        pv = peer_values(vals, fig, lib)
        if not pv:
            continue
        m = st.median(pv.values())
        if best is None or (m > best[2] if higher_better else m < best[2]):
            best = (lib, pv, m)
    return best and best[:2]


def peers_in(vals):
    return sorted({lib for (_, lib) in vals if not lib.startswith("dlock")})


def vs_best_rows(vals):
    """Issue 21's figures: (label, figure key, higher is better, candidate
    peers). Hot-key figures use the largest W that ran."""
    ws = [int(f.split()[1][2:]) for (f, _) in vals if f.startswith("3 W=")]
    w = max(ws) if ws else 100
    peers = peers_in(vals)
    return [
        ("1. G=1 pair p50 µs vs the fastest peer", "1a G=1 pair p50 µs", False, peers),
        ("1. G=1 pair p50 in PINGs (same run) vs the peer with the fewest", "1b G=1 pair p50 in PINGs (same run)", False, peers),
        ("2. G=16 pairs/s vs the best go-redis peer", "2 G=16 pairs/s", True, [p for p in peers if p in GO_REDIS_PEERS]),
        ("2. G=16 pairs/s vs rueidislock", "2 G=16 pairs/s", True, [p for p in peers if p == "rueidislock"]),
        (f"3. W={w} separate: cmds/grant vs the lowest peer", f"5 W={w} cmds/grant", False, peers),
        (f"3. W={w} separate: Redis CPU µs/grant vs the lowest peer", f"3 W={w} Redis CPU µs/grant", False, peers),
        (f"3. W={w} separate: hand-off gap p50 ms vs the lowest peer", f"4 W={w} gap p50 ms", False, peers),
        ("4. G=1 Redis CPU µs/pair vs the lowest peer", "6 G=1 Redis CPU µs/pair", False, peers),
        ("4. G=16 Redis CPU µs/pair vs the lowest peer", "6 G=16 Redis CPU µs/pair", False, peers),
    ] + [
        (f"5. W={sw} shared: {what} vs the lowest peer", f"{n} W={sw} shared {what}", False, peers)
        for sw in sorted({int(f.split()[1][2:]) for (f, _) in vals if f.startswith("9 W=")})
        for n, what in (("9", "cmds/grant"), ("7", "Redis CPU µs/grant"), ("8", "gap p50 ms"))
    ]


def vs_best_table(vals):
    out = ["| figure (issue 21) | better | best peer: median | dlock before: median | before/peer (blocks min–max) | dlock after: median | after/peer (blocks min–max) | n blocks |",
           "|---|---|---|---|---|---|---|---|"]
    rows = 0
    for label, fig, higher, cands in vs_best_rows(vals):
        best = best_peer(vals, fig, cands, higher)
        dl = vals.get((fig, "dlock"), {})
        if best is None or not dl:
            continue
        name, pv = best
        pm = st.median(pv.values())
        cells = []
        for side in ("before", "after"):
            xs = dl.get(side)
            if not xs or not pm:
                cells += ["–", "–"]
                continue
            pr = [xs[p] / pv[p] for p in xs if p in pv and pv[p]]
            rng = f" ({min(pr):.2f}–{max(pr):.2f})" if pr else ""
            cells += [fmt(st.median(xs.values())), f"**{st.median(xs.values()) / pm:.3f}**{rng}"]
        n = min(len(pv), *(len(dl[s]) for s in dl))
        out.append(f"| {label} | {'higher' if higher else 'lower'} | {name}: {fmt(pm)} | {' | '.join(cells)} | {n} |")
        rows += 1
    return out if rows else []


def main(runs):
    vals, problems = load(runs)
    for prob in problems:
        print(f"- {prob}")
    if problems:
        print()
    print("\n".join(before_after_table(vals)))
    t = vs_best_table(vals)
    if t:
        print()
        print("#### dlock vs the best peer (medians over blocks; the ratio's min–max is over blocks, against the same peer)")
        print()
        print("\n".join(t))


if __name__ == "__main__":
    main(sys.argv[1])
