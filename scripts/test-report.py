#!/usr/bin/env python3
"""The table at the end of `make test` (scripts/run-tests.sh): where the time went.

Reads what the run left behind:
  --phases FILE    one "STEP <tab> SECONDS <tab> ok|FAILED" line per step of run-tests.sh
  --timings FILE   one "TEST <tab> SHARD <tab> START <tab> END <tab> RESULT" line per end-to-end
                   gtest test (e2e/lib/test_timings.cpp)
  --junit FILE     ctest's JUnit report of the end-to-end run (every ctest test and its time)
  --unit FILE, --e2e FILE   ctest's output, for the pass/fail counts ("N tests failed out of M");
                   the unit output also counts the GoogleTest cases run under a sanitizer
                   (scripts/sanitize.sh: "[sanitize MODE] N tests passed[, M failed][, K skipped]")
  --ccache FILE    `ccache --show-stats`, for the hit rate
and prints each step's wall time, each shard's wall and busy time, the 15 slowest tests, and the
counts, ending with the line "total: N passed, M failed".

  --self-test      checks the table against inputs made up here (a unit test, test_report)
"""
import argparse
import collections
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ElementTree


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def minutes(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60:d}:{seconds % 60:02d}"


def ctest_counts(path):
    """(passed, failed) from ctest's summary line, or (0, 0) when the run never got there."""
    for line in reversed(read_lines(path)):
        m = re.search(r"(\d+) tests? failed out of (\d+)", line)
        if m:
            failed, total = int(m.group(1)), int(m.group(2))
            return total - failed, failed
    return 0, 0


def sanitized_counts(path):
    """(passed, failed, skipped) summed over scripts/sanitize.sh's result lines."""
    passed = failed = skipped = 0
    for line in read_lines(path):
        m = re.match(r"\[sanitize \w+\] (\d+) tests? passed"
                     r"(?:, (\d+) failed)?(?:, (\d+) skipped)?", line)
        if m:
            passed += int(m.group(1))
            failed += int(m.group(2) or 0)
            skipped += int(m.group(3) or 0)
    return passed, failed, skipped


def junit_cases(path):
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return []
    cases = []
    for case in root.iter("testcase"):
        status = case.get("status", "run")
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None or status == "notrun"
        cases.append((case.get("name", "?"), float(case.get("time", "0") or 0),
                      "failed" if failed else "skipped" if skipped else "passed"))
    return cases


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("phases", "timings", "junit", "unit", "e2e", "ccache"):
        parser.add_argument("--" + name, default="")
    parser.add_argument("--sanitizers", default="")
    parser.add_argument("--fuzz", default="")
    parser.add_argument("--slowest", type=int, default=15)
    parser.add_argument("--self-test", action="store_true")
    return parser.parse_args(argv)


def render(args):
    out = []
    out.append("")
    out.append("== where the time went (wall clock, min:s) ==")
    for line in read_lines(args.phases):
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        step, seconds = parts[0], float(parts[1])
        verdict = parts[2] if len(parts) > 2 else ""
        out.append(f"  {step:<22} {minutes(seconds):>7}  {verdict}")

    shards = collections.defaultdict(list)
    for line in read_lines(args.timings):
        parts = line.split("\t")
        if len(parts) >= 5:
            shards[parts[1]].append((float(parts[2]), float(parts[3])))
    if shards:
        out.append("")
        out.append("== end-to-end shards ==")
        out.append(f"  {'shard':<8} {'tests':>5} {'wall':>7} {'busy':>7}")
        order = sorted(shards, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s))
        for shard in order:
            spans = shards[shard]
            wall = max(e for _, e in spans) - min(s for s, _ in spans)
            busy = sum(e - s for s, e in spans)
            out.append(f"  {shard:<8} {len(spans):>5} {minutes(wall):>7} {minutes(busy):>7}")

    cases = junit_cases(args.junit)
    if cases:
        out.append("")
        out.append(f"== the {args.slowest} slowest end-to-end tests (s) ==")
        for name, seconds, result in sorted(cases, key=lambda c: -c[1])[:args.slowest]:
            out.append(f"  {seconds:7.1f}  {name}{'' if result == 'passed' else '  ' + result}")

    ccache = " ".join(read_lines(args.ccache))
    hits = re.search(r"Hits:\s+(\d+)\s*/\s*(\d+)", ccache)
    if hits:
        out.append("")
        out.append(f"ccache: {hits.group(1)} of {hits.group(2)} compilations from the cache")

    sanitized_pass, sanitized_fail, unit_skipped = sanitized_counts(args.unit)
    unit_pass, unit_fail = ctest_counts(args.unit)
    unit_pass, unit_fail = unit_pass + sanitized_pass, unit_fail + sanitized_fail
    e2e_pass, e2e_fail = ctest_counts(args.e2e)
    out.append("")
    skipped = f" ({unit_skipped} skipped under the sanitizer)" if unit_skipped else ""
    out.append(f"unit: {unit_pass} passed, {unit_fail} failed{skipped}")
    out.append(f"e2e: {e2e_pass} passed, {e2e_fail} failed")
    if args.sanitizers:
        out.append(f"sanitizers: {args.sanitizers}")
    if args.fuzz:
        out.append(f"fuzzing: {args.fuzz}")
    out.append(f"total: {unit_pass + e2e_pass} passed, {unit_fail + e2e_fail} failed")
    return "\n".join(out)


def self_test():
    inputs = {
        "phases": "packages\t3\tok\nbuild\t75\tok\ne2e\t725\tFAILED\n",
        "timings": ("A.One\t1\t100.0\t160.0\tpassed\nA.Two\t1\t170.0\t200.0\tpassed\n"
                    "B.One\t2\t100.0\t400.0\tfailed\nR.One\treal\t100.0\t110.0\tpassed\n"),
        "junit": ('<testsuite><testcase name="A.One" time="60.0"/>'
                  '<testcase name="B.One" time="300.0"><failure message="x"/></testcase>'
                  '<testcase name="A.Two" time="30.0"/></testsuite>'),
        "unit": ("100% tests passed, 0 tests failed out of 12\n"
                 "[sanitize address] 798 tests passed, 2 failed, 3 skipped (20 s)\n"),
        "e2e": "99% tests passed, 1 tests failed out of 197\n",
        "ccache": "Cacheable calls: 152 / 152\n  Hits: 149 / 152 (98.03%)\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        argv = []
        for name, text in inputs.items():
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            argv += ["--" + name, path]
        table = render(parse(argv + ["--slowest", "2", "--sanitizers", "clean"]))
    expected = [
        "  build                     1:15  ok",
        "  e2e                      12:05  FAILED",
        "  1            2    1:40    1:30",  # wall 100-200 s, busy 60 + 30 s
        "  2            1    5:00    5:00",
        "  real         1    0:10    0:10",
        "    300.0  B.One  failed",
        "     60.0  A.One",
        "ccache: 149 of 152 compilations from the cache",
        "unit: 810 passed, 2 failed (3 skipped under the sanitizer)",
        "e2e: 196 passed, 1 failed",
        "sanitizers: clean",
        "total: 1006 passed, 3 failed",
    ]
    lines = table.splitlines()
    missing = [line for line in expected if line not in lines]
    if "A.Two" in table:
        missing.append("(A.Two is not among the 2 slowest)")
    if missing:
        print(table)
        print("test-report self-test: missing lines:\n" + "\n".join(missing), file=sys.stderr)
        return 1
    print("test-report self-test: ok")
    return 0


def main():
    args = parse(sys.argv[1:])
    if args.self_test:
        return self_test()
    print(render(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
