#!/usr/bin/env python3
"""The plots of `make bench` (scripts/bench.sh runs it at the end; it also runs alone):

  scripts/bench-plot.py OUTPUT_TXT [CURVES_TSV] --out-dir DIR

writes into DIR
  ratios.png   every ratio the bench printed in OUTPUT_TXT (its whole output,
               $TPUJOB_BENCH_DIR.output.txt) that RATIOS below knows, as a horizontal bar beside
               its goal: green meets it, red misses it, grey has no stated goal;
  curves.png   the in-memory scale curves of CURVES_TSV (default: OUTPUT_TXT's name with
               .output.txt turned into .curves.tsv, which the bench's `curves` section writes):
               one log-log panel per series, its points, the least-squares line through them in
               log-log with its growth exponent, the goal where a row gives one, and the n^1.2
               bound DESIGN.md section 8 holds every curve to.
A file that is missing, or holds nothing known, skips its plot with one line saying so. Exits 0
when every plot it could make was written, 1 on an error, 2 on bad arguments.

CURVES_TSV: a header line "series<TAB>x_label<TAB>y_label<TAB>x<TAB>y<TAB>goal", then one row per
point; goal is empty or the y goal at that point. Unknown series are plotted like the known ones.

  --self-test   runs the two plots on inputs made up here and checks what was parsed and written
                (ctest bench_plot; exits 77, skipped, when matplotlib is not installed)
"""
import argparse
import collections
import math
import os
import re
import sys
import tempfile
import textwrap

# The ratios, in the order they are drawn (top to bottom): the line that prints each one (a
# regular expression over one line of the output), the bar's name (str.format over the match's
# named groups), the value (a group name, or a function of the match), the goal (a number, a
# function of the match, or None when none is stated) and which side of the goal meets it.
# Goals: DESIGN.md section 8 ("Numbers we hold ourselves to") and the Goal column of
# docs/benchmarks.md; the ones the bench prints itself ("goal <= 0.25") are the same numbers.
RATIOS = [
    # "multislice creation, 64 pods: 4 x 16 418 ms vs 1 x 64 460 ms (median of 3): ratio 0.91"
    (r"^multislice creation, (?P<pods>\d+) pods: (?P<multi>\d+ x \d+) .*: ratio (?P<ratio>[\d.]+)",
     "multislice/one slice creation, {multi} ({pods} pods)", "ratio", None, "<="),
    # The ceiling's table: "64  472 ms  474 ms  489 ms  499 ms  1.00, 0.97, 0.95"
    (r"^(?P<workers>\d+)\s+(?P<b0>\d+) ms\s+(?P<op>\d+) ms\s+(?P<js>\d+) ms\s+(?P<old>\d+) ms\s+"
     r"(?P<r_op>[\d.]+), (?P<r_js>[\d.]+), (?P<r_old>[\d.]+)\s*$",
     "gang creation B0/TPUJob, {workers} workers", "r_op", 0.9, ">="),
    (None, "gang creation JobSet/TPUJob time, {workers} workers",
     lambda m: float(m["js"]) / float(m["op"]), 1.0, ">="),
    (None, "gang creation B0/TPUJob old (former client limit), {workers} workers", "r_old", None,
     ">="),
    # The caches' table, a row per size ending "| RSS ratio, sync ratio" (operator/client-go).
    (r"^(?P<nodes>\d+)\s+(?P<pods>\d+)\s+\|.*\|\s*(?P<rss>[\d.]+), (?P<sync>[\d.]+)\s*$",
     "caches RSS operator/client-go, {nodes} nodes {pods} pods", "rss", 0.1, "<="),
    (None, "caches sync time operator/client-go, {nodes} nodes {pods} pods", "sync", 1.0, "<="),
    # "    round 1: this 1690 / 3245; ceiling 2048 / 2646; ratio 0.83 / 1.23" (p50 / p99)
    (r"^\s+round (?P<round>\d+):.* ratio (?P<p50>[\d.]+) / (?P<p99>[\d.]+)\s*$",
     "fault bursts p99 operator/raw ceiling, round {round}", "p99", 1.2, "<="),
    (None, "fault bursts p50 operator/raw ceiling, round {round}", "p50", None, "<="),
    # "slice recovery 4x16, medians of 3 + 3 runs: ... ratio slice/job 0.41; operator API
    # writes: Slice 90, Job 400, ratio 0.22 (1/slices = 0.25); ..." (not the re-run "without
    # re-created pods", the same measurement less some runs)
    # With SLICE_RESTART=InPlace (the largest section, 64x64): "slice recovery 64x64 in place,
    # medians of ...", its writes' goal 2/slices (issue goal: <= 2/64 of the re-issue's).
    (r"^slice recovery (?P<shape>\d+x\d+)(?P<mode> in place)?, medians of [^:]*runs: .* ratio "
     r"slice/job (?P<time>[\d.]+); operator API writes: .* ratio (?P<writes>[\d.]+) \(1/slices = "
     r"(?P<share>[\d.]+)\)",
     "slice recovery{mode} Slice/Job time, {shape}", "time", 0.3, "<="),
    (None, "slice recovery{mode} Slice/Job API writes, {shape}", "writes",
     lambda m: float(m["share"]) * (2 if m["mode"] else 1), "<="),
    # "largest job creation, 64 x 64 = 4096 pods, medians of 3: B0 46060 ms, TPUJob 27524 ms:
    # ratio B0/TPUJob 1.67 (goal >= 0.9)"
    (r"^largest job creation, (?P<shape>\d+ x \d+) = (?P<pods>\d+) pods, .* ratio B0/TPUJob "
     r"(?P<ratio>[\d.]+)", "gang creation B0/TPUJob, {shape} ({pods} workers)", "ratio", 0.9, ">="),
    # "hot swap 4x16, median of 3 runs: ...; ratio hot swap/slice recovery with a free pool 1.30"
    (r"^hot swap (?P<shape>\d+x\d+), .*ratio hot swap/slice recovery with a free pool "
     r"(?P<ratio>[\d.]+)", "hot swap/slice recovery with a free pool, {shape}", "ratio", None,
     "<="),
    # "in-place restart, 64 workers, ...: InPlace 800 ms, Recreate 4000 ms, ratio
    # in-place/recreate 0.20 (goal <= 0.25); ..."
    (r"^in-place restart, (?P<workers>\d+) workers, .*ratio in-place/recreate (?P<ratio>[\d.]+)",
     "in-place restart InPlace/Recreate, {workers} workers", "ratio", 0.25, "<="),
    # "throughput: 512 MB (...) through cat 900 MB/s, through tpujob-supervise 800 MB/s, ratio 0.89"
    (r"^throughput: .* through tpujob-supervise .* ratio (?P<ratio>[\d.]+)",
     "supervisor throughput/cat's", "ratio", 0.8, ">="),
    # "  the agent's interval: 60 s; immediate verdict / interval = 0.031"
    (r"immediate verdict / interval = (?P<ratio>[\d.]+)",
     "attribution: immediate verdict/agent's interval", "ratio", None, "<="),
    # The idle section's "...; per node update: operator 85 us, client-go 267 us; ratio
    # operator/client-go 0.32" (the results block's summary: "client-go informer 267 us, ratio 0.32").
    (r"per node update: operator \d+ us, client-go(?: informer)? \d+ us[;,] ratio(?: operator/client-go)? "
     r"(?P<ratio>[\d.]+)",
     "idle CPU per node update operator/client-go", "ratio", 1.0, "<="),
    # "status.progress refresh in those 60 s: 1000 log tail reads for 1000 jobs (1.00 per job per
    # minute; goal <= 1): ..."
    (r"\((?P<ratio>[\d.]+) per job per minute; goal <= 1\)",
     "idle progress log reads per job per minute", "ratio", 1.0, "<="),
]
# DESIGN.md section 8: "no curve above n^1.2".
GROWTH_BOUND = 1.2
CURVES_HEADER = ["series", "x_label", "y_label", "x", "y", "goal"]


def parse_ratios(lines):
    """[(name, value, goal or None, direction)] in RATIOS' order, each line's matches in turn."""
    rules, pattern = [], None
    for regex, name, value, goal, direction in RATIOS:
        if regex is not None:
            pattern = re.compile(regex)
        rules.append((pattern, name, value, goal, direction))
    by_rule = collections.defaultdict(list)
    for line in lines:
        for index, (pattern, name, value, goal, direction) in enumerate(rules):
            match = pattern.search(line)
            if not match:
                continue
            groups = {k: ("" if v is None else v) for k, v in match.groupdict().items()}
            try:
                measured = value(groups) if callable(value) else float(groups[value])
                wanted = goal(groups) if callable(goal) else goal
            except (ValueError, ZeroDivisionError, TypeError):
                continue
            if math.isfinite(measured):
                by_rule[index].append((name.format(**groups), measured, wanted, direction))
    return [entry for index in range(len(rules)) for entry in by_rule[index]]


def meets(value, goal, direction):
    return value <= goal if direction == "<=" else value >= goal


def read_curves(path):
    """{series: {"x_label", "y_label", "points": [(x, y, goal or None)]}} in file order."""
    series = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    if not rows or [c.strip() for c in rows[0][:6]] != CURVES_HEADER:
        raise ValueError(f"{path}: the first line is not the header {' '.join(CURVES_HEADER)}")
    for number, row in enumerate(rows[1:], start=2):
        row += [""] * (6 - len(row))
        try:
            x, y = float(row[3]), float(row[4])
            goal = float(row[5]) if row[5].strip() else None
        except ValueError:
            print(f"bench-plot: {path}:{number}: not a point, skipped: {row}", file=sys.stderr)
            continue
        entry = series.setdefault(row[0], {"x_label": row[1], "y_label": row[2], "points": []})
        entry["points"].append((x, y, goal))
    return series


def growth_exponent(points):
    """The least-squares slope of log y over log x, or None with fewer than two distinct x."""
    import numpy

    xs = [x for x, y, _ in points if x > 0 and y > 0]
    ys = [y for x, y, _ in points if x > 0 and y > 0]
    if len(set(xs)) < 2:
        return None
    slope, intercept = numpy.polyfit(numpy.log10(xs), numpy.log10(ys), 1)
    return float(slope), float(intercept)


def plot_curves(series, path, title):
    import matplotlib.pyplot as plt
    import numpy

    columns = min(3, len(series))
    rows = math.ceil(len(series) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows), squeeze=False)
    for ax in axes.flat[len(series):]:
        ax.set_visible(False)
    fits = {}
    for ax, (name, entry) in zip(axes.flat, series.items()):
        points = sorted(entry["points"])
        positive = [(x, y) for x, y, _ in points if x > 0 and y > 0]
        ax.set_xscale("log")
        ax.set_yscale("log")
        if positive:
            ax.plot(*zip(*positive), "o", color="tab:blue", label="measured")
        fit = growth_exponent(points)
        fits[name] = fit and fit[0]
        if fit:
            slope, intercept = fit
            xs = numpy.geomspace(positive[0][0], positive[-1][0], 50)
            ax.plot(xs, 10 ** intercept * xs ** slope, "-", color="tab:blue", alpha=0.6,
                    label=f"least-squares fit: growth $n^{{{slope:.2f}}}$")
            x0, y0 = positive[0]
            ax.plot(xs, y0 * (xs / x0) ** GROWTH_BOUND, ":", color="grey",
                    label=f"$n^{{{GROWTH_BOUND:g}}}$ from the first point (the bound)")
        goals = [(x, goal) for x, _, goal in points if goal is not None and x > 0 and goal > 0]
        if goals:
            ax.plot(*zip(*goals), "--", marker="_", markersize=14, color="tab:red", label="goal")
        ax.set_title(name)
        ax.set_xlabel(f"{entry['x_label']} (log)")
        ax.set_ylabel(f"{entry['y_label']} (log)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return fits


def plot_ratios(ratios, path, title):
    import matplotlib.pyplot as plt

    colours = {True: "tab:green", False: "tab:red", None: "tab:gray"}
    figure, ax = plt.subplots(figsize=(11, 0.42 * len(ratios) + 1.6))
    rows = range(len(ratios))
    verdicts = [None if goal is None else meets(value, goal, direction)
                for _, value, goal, direction in ratios]
    ax.barh(rows, [value for _, value, _, _ in ratios], height=0.6,
            color=[colours[v] for v in verdicts])
    top = max(max(value, goal or 0) for _, value, goal, _ in ratios)
    for row, (_, value, goal, direction) in zip(rows, ratios):
        sign = "\u2264" if direction == "<=" else "\u2265"
        label = f"{value:.2f}" + ("" if goal is None else f"  (goal {sign} {goal:.2f})")
        ax.text(max(value, goal or 0) + top * 0.01, row, label, va="center", fontsize=8)
        if goal is not None:
            ax.plot([goal, goal], [row - 0.4, row + 0.4], color="black", linewidth=2.5)
    ax.set_yticks(list(rows), [name for name, _, _, _ in ratios], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.3)
    ax.set_xlabel("ratio (bar: measured; black tick: goal; green meets it, red misses it, "
                  "grey: no stated goal)")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    figure.suptitle(title)
    ax.grid(True, axis="x", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return verdicts


def default_curves(output):
    if output.endswith(".output.txt"):
        return output[: -len(".output.txt")] + ".curves.tsv"
    return None


def run(output, curves, out_dir):
    """Writes the plots; returns the exit status."""
    import matplotlib

    matplotlib.use("Agg")
    with open(output, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    # The bench's first line says when, where and on which commit it ran.
    first = next((line.strip() for line in lines if line.strip()), "")
    title = first if first.startswith("make bench") else output
    title = "\n".join(textwrap.wrap(title, 90, max_lines=2, placeholder=" ..."))
    os.makedirs(out_dir, exist_ok=True)
    ratios = parse_ratios(lines)
    if ratios:
        path = os.path.join(out_dir, "ratios.png")
        plot_ratios(ratios, path, "ratios against their goals\n" + title)
        print(f"bench-plot: {path} ({len(ratios)} ratios)")
    else:
        print(f"bench-plot: no known ratio in {output}: no ratios.png")
    if curves and os.path.exists(curves):
        series = read_curves(curves)
        if series:
            path = os.path.join(out_dir, "curves.png")
            fits = plot_curves(series, path, "in-memory growth with size (log-log)\n" + title)
            steep = [name for name, slope in fits.items() if slope and slope > GROWTH_BOUND]
            print(f"bench-plot: {path} ({len(series)} series"
                  f"{'; above n^%g: %s' % (GROWTH_BOUND, ', '.join(steep)) if steep else ''})")
        else:
            print(f"bench-plot: no points in {curves}: no curves.png")
    else:
        print(f"bench-plot: no curves file ({curves or 'none given'}): no curves.png")
    return 0


SAMPLE_OUTPUT = """make bench of 2026-12-05 07:00 UTC (commit abc1234), 2 cores (sample), load average 1 1 1
multislice creation, 64 pods: 4 x 16 418 ms vs 1 x 64 460 ms (median of 3): ratio 0.91
workers  B0         TPUJob     JobSet     TPUJob old   ratios B0/TPUJob, B0/JobSet, B0/TPUJob old (1.00 = the raw ceiling)
64       472 ms     474 ms     489 ms     499 ms       1.00, 0.97, 0.95
256      2562 ms    2362 ms    1859 ms    3401 ms      1.08, 1.38, 0.75
  runs (ms): B0 1 2 | TPUJob 1 2 | JobSet 1 2 | old 1 2
500    2000   | 38768       6440      9950 KiB  473 ms   | 54864       10486     300 ms   31512 KiB | 0.71, 1.58
    round 1: this 1690 / 3245; ceiling 2048 / 2646; ratio 0.83 / 1.23
slice recovery 4x16, medians of 3 + 3 runs: fault -> all Running: Slice 900 ms, Job 3000 ms, ratio slice/job 0.30; operator API writes: Slice 90, Job 400, ratio 0.22 (1/slices = 0.25); pods scheduled: Slice 16, Job 64
slice recovery 64x64 in place, medians of 3 + 3 runs: fault -> every program running (Slice), all Running (Job): Slice 231807 ms, Job 100000 ms, ratio slice/job 2.32; operator API writes: Slice 12319, Job 8300, ratio 1.484 (1/slices = 0.016); pods scheduled: Slice 64, Job 4096
largest job creation, 64 x 64 = 4096 pods, medians of 3: B0 46060 ms, TPUJob 27524 ms: ratio B0/TPUJob 1.67 (goal >= 0.9)
in-place restart, 64 workers, medians of 3 + 3 runs: fault -> every program of the next generation running: InPlace 800 ms, Recreate 4000 ms, ratio in-place/recreate 0.20 (goal <= 0.25); operator API writes per restart: InPlace 3, Recreate 130
CPU in the same 60 s: operator 1.13 s, client-go informer 3.54 s; per node update: operator 85 us, client-go 267 us; ratio operator/client-go 0.32
"""
SAMPLE_CURVES = """series\tx_label\ty_label\tx\ty\tgoal
admission-nodes\tnodes\tms\t1000\t1.0\t
admission-nodes\tnodes\tms\t10000\t10.0\t
admission-nodes\tnodes\tms\t65000\t65.0\t50
heap-pod-nodes\tnodes\tbytes\t1000\t1e6\t
heap-pod-nodes\tnodes\tbytes\t4000\t1.6e7\t
someone-new\tworkers\tms\t64\t2\t
someone-new\tworkers\tms\tnot-a-number\t2\t
"""


def self_test():
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as error:
        print(f"bench-plot self-test: skipped ({error}; python3-matplotlib installs it)")
        return 77
    problems = []
    ratios = {name: (value, goal, direction) for name, value, goal, direction
              in parse_ratios(SAMPLE_OUTPUT.splitlines())}
    expected = {
        "multislice/one slice creation, 4 x 16 (64 pods)": (0.91, None),
        "gang creation B0/TPUJob, 256 workers": (1.08, 0.9),
        "gang creation JobSet/TPUJob time, 64 workers": (489 / 474, 1.0),
        "caches RSS operator/client-go, 500 nodes 2000 pods": (0.71, 0.1),
        "caches sync time operator/client-go, 500 nodes 2000 pods": (1.58, 1.0),
        "fault bursts p99 operator/raw ceiling, round 1": (1.23, 1.2),
        "slice recovery Slice/Job time, 4x16": (0.30, 0.3),
        "slice recovery Slice/Job API writes, 4x16": (0.22, 0.25),
        "slice recovery in place Slice/Job time, 64x64": (2.32, 0.3),
        "slice recovery in place Slice/Job API writes, 64x64": (1.484, 0.032),
        "gang creation B0/TPUJob, 64 x 64 (4096 workers)": (1.67, 0.9),
        "in-place restart InPlace/Recreate, 64 workers": (0.20, 0.25),
        "idle CPU per node update operator/client-go": (0.32, 1.0),
    }
    for name, (value, goal) in expected.items():
        got = ratios.get(name)
        if not got or abs(got[0] - value) > 1e-9 or got[1] != goal:
            problems.append(f"ratio {name!r}: want {value} (goal {goal}), got {got}")
    if len(ratios) != 18:
        problems.append(f"want 18 ratios, got {len(ratios)}: {sorted(ratios)}")
    with tempfile.TemporaryDirectory() as scratch:
        output = os.path.join(scratch, "bench.output.txt")
        with open(output, "w", encoding="utf-8") as f:
            f.write(SAMPLE_OUTPUT)
        with open(default_curves(output), "w", encoding="utf-8") as f:
            f.write(SAMPLE_CURVES)
        series = read_curves(default_curves(output))
        slope = growth_exponent(series["heap-pod-nodes"]["points"])[0]
        if abs(slope - 2.0) > 1e-9:
            problems.append(f"heap-pod-nodes growth: want 2.0, got {slope}")
        if len(series["someone-new"]["points"]) != 1:
            problems.append("the row that is not a point was not skipped")
        plots = os.path.join(scratch, "plots")
        run(output, default_curves(output), plots)
        for name in ("ratios.png", "curves.png"):
            path = os.path.join(plots, name)
            with open(path, "rb") as f:
                if f.read(8) != b"\x89PNG\r\n\x1a\n":
                    problems.append(f"{name}: not a PNG")
        os.remove(default_curves(output))
        os.remove(os.path.join(plots, "curves.png"))
        run(output, default_curves(output), plots)
        if os.path.exists(os.path.join(plots, "curves.png")):
            problems.append("curves.png written without a curves file")
    if problems:
        print("bench-plot self-test:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print("bench-plot self-test: ok")
    return 0


def with_matplotlib():
    """Runs on the system's python3 when the first python3 on the PATH (a virtualenv, pyenv) cannot
    import matplotlib: python3-matplotlib is a Debian package, installed for /usr/bin/python3."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(system) and os.access(system, os.X_OK):
            os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])


def main():
    with_matplotlib()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output", nargs="?", help="the bench's whole output (OUTPUT_TXT)")
    parser.add_argument("curves", nargs="?", help="the curves TSV (CURVES_TSV)")
    parser.add_argument("--out-dir", help="where the PNGs go")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.output or not args.out_dir:
        parser.error("OUTPUT_TXT and --out-dir are needed")
    try:
        return run(args.output, args.curves or default_curves(args.output), args.out_dir)
    except (OSError, ValueError) as error:
        print(f"bench-plot: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
