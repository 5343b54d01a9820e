#!/usr/bin/env python3
"""`vgpu-bench replay --min-limit` in steps of 0.001 x peak live: its scan (steps of 0.005, the
minimum being the first of 20 limits in a row that serve every allocation) is too coarse to
tell two placement rules apart on one trace, so below its minimum the limit is lowered by
0.001 while the replay still serves every allocation. Growth off.

  scripts/fine_limit.py BENCH TRACE... [-- extra vgpu-bench flags]

Prints one ratio per trace, then their mean and largest (docs/vmm.md compares rules this way
over seeds 1-16 of scripts/gen_traces.py).
"""
import re
import subprocess
import sys


def peak_live(trace):
    with open(trace) as f:
        for line in f:
            m = re.match(r"# peak_live_bytes (\d+)", line)
            if m:
                return int(m.group(1))
            if not line.startswith("#"):
                break
    sys.exit(f"{trace}: no '# peak_live_bytes' header (a trace written by gen_traces.py)")


def fits(bench, trace, limit, extra):
    r = subprocess.run([bench, "replay", trace, "--allocator", "vmm", "--limit", str(limit),
                        "--no-baseline"] + extra, capture_output=True, text=True)
    out = r.stdout + r.stderr
    return '"ns_per_op"' in out and "allocations failed" not in out


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1:]
    if len(args) < 2:
        sys.exit(__doc__)
    bench, traces = args[0], args[1:]
    ratios = []
    for t in traces:
        peak = peak_live(t)
        out = subprocess.run([bench, "replay", t, "--allocator", "vmm", "--min-limit",
                              "--no-baseline"] + extra, capture_output=True, text=True).stdout
        m = re.search(r'"min_limit_ratio":([0-9.]+)', out)
        if not m:
            sys.exit(f"{t}: no min_limit_ratio in vgpu-bench's output")
        r = float(m.group(1))
        for _ in range(4):  # down to the next coarse step
            if not fits(bench, t, int(peak * round(r - 0.001, 3)), extra):
                break
            r = round(r - 0.001, 3)
        ratios.append(r)
        print(f"{t} {r:.3f}", flush=True)
    print(f"mean {sum(ratios) / len(ratios):.4f} max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
