"""How busy each cold run kept the simulated object-store link.

Reads the console of a harness run made with
`SILT_LOG=info,silt_store::link=debug,silt::bench::run=debug SILT_BENCH_VERBOSE=1`
(the servers' `silt_store::link` GET events and the harness's run start and
finish events, all with wall-clock timestamps) and prints, per cold run (the
first run on each fresh server): its time, the GETs it made and their bytes,
the link time those bytes need at the store's bandwidth, how long the link
stood idle between the run's start and its last byte, and how long the run went
on after its last byte arrived (CPU the fetches did not hide).

    python3 scripts/store_link.py console.log [--mbps 100] [--gets]
"""

import argparse
import datetime
import re

ANSI = re.compile(r"\x1b\[[0-9;]*m")
GET = re.compile(
    r"silt_store::link: GET location=(\S+) bytes=(\d+) asked_ms=([\d.]+) sent_ms=([\d.]+) done_ms=([\d.]+)"
)
QUERY = re.compile(r"\b(q\d+)\s+cold\s")


def wall_ms(line):
    """The line's timestamp (its first token, after a verbose child's `|`), in ms."""
    token = line.lstrip(" |").split()[0]
    return datetime.datetime.fromisoformat(token.replace("Z", "+00:00")).timestamp() * 1e3


def cold_runs(path):
    """(query, start, finish, [(object, bytes, asked, sent, done)]) per cold run, times in wall ms."""
    runs, names, current, fresh = [], [], None, False
    for raw in open(path, encoding="utf-8", errors="replace"):
        line = ANSI.sub("", raw)
        if "Flight SQL listening" in line:
            fresh = True
        elif "run started" in line:
            current = [wall_ms(line), None, []]
            if fresh:
                runs.append(current)
                fresh = False
        elif "run finished" in line and current is not None:
            current[1] = wall_ms(line)
        elif (m := GET.search(line)) and current is not None and current[1] is None:
            # The event's times are ms since its store was made; its own
            # timestamp is when it was logged, just after `done`.
            origin = wall_ms(line) - float(m[5])
            current[2].append((m[1], int(m[2]), *(origin + float(m[i]) for i in (3, 4, 5))))
        if m := QUERY.search(line):
            names.append(m[1])
    return [(q, *run) for q, run in zip(names, runs) if run[1] is not None]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("console")
    parser.add_argument("--mbps", type=float, default=100.0, help="the store's bandwidth, MB/s")
    parser.add_argument("--gets", action="store_true", help="list every GET too")
    args = parser.parse_args()
    print("| query | cold ms | GETs | MB | link ms needed | link idle ms before last byte | ms after last byte |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for query, start, finish, gets in cold_runs(args.console):
        total = sum(g[1] for g in gets)
        idle, free = 0.0, start
        for sent, done in sorted((g[3], g[4]) for g in gets):
            idle += max(0.0, sent - free)
            free = max(free, done)
        last = max((g[4] for g in gets), default=start)
        print(
            f"| {query} | {finish - start:.0f} | {len(gets)} | {total / 1e6:.1f} | "
            f"{total / (args.mbps * 1e3):.0f} | {idle:.0f} | {finish - last:.0f} |"
        )
        if args.gets:
            for obj, size, asked, sent, done in sorted(gets, key=lambda g: g[2]):
                print(f"|   {obj} | {size / 1e6:.2f} MB | asked +{asked - start:.0f} | sent +{sent - start:.0f} | done +{done - start:.0f} | | |")


if __name__ == "__main__":
    main()
