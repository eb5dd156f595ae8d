#!/usr/bin/env python3
"""Runs every benchmark program (build/bench/bench_*) and prints one table of ratios.

Each program measures a figure and a baseline in the same run and prints JSON lines (see
bench/bench_util.h). The table goes to stdout and, as JSON, to bench/out/results.json.

usage: .venv/bin/python bench/run.py [--build DIR] [NAME ...]   (NAME filters the programs)
"""
import argparse
import json
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("names", nargs="*", help="run only programs whose name contains one")
    args = parser.parse_args()
    programs = sorted((pathlib.Path(args.build) / "bench").glob("bench_*"))
    if args.names:
        programs = [p for p in programs if any(n in p.name for n in args.names)]
    if not programs:
        sys.exit(f"no benchmark programs in {args.build}/bench: run `make build` first")
    results = []
    for program in programs:
        print(f"[bench] {program.name} ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        proc = subprocess.run([str(program)], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            sys.exit(f"{program.name} failed ({proc.returncode}):\n{proc.stderr}")
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                results.append(json.loads(line))
        print(f"[bench] {program.name} took {time.monotonic() - start:.1f} s", file=sys.stderr)

    header = ("benchmark", "case", "value", "baseline", "ratio", "goal")
    rows = [
        (
            r["bench"],
            r["case"],
            f'{r["value"]:.4g} {r["unit"]}',
            f'{r["baseline"]}: {r["baseline_value"]:.4g}',
            f'{r["ratio"]:.2f}',
            r["goal"] if r["goal"] == "none" else f'{r["goal"]} {"met" if r["met"] else "MISSED"}',
        )
        for r in results
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    machine = f"{platform.machine()}, {platform.processor() or 'cpu'}, Linux {platform.release()}"
    (out / "results.json").write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    missed = [r for r in results if not r["met"]]
    if missed:
        print(f"\n{len(missed)} goal(s) missed", file=sys.stderr)


if __name__ == "__main__":
    main()
