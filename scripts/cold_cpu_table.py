#!/usr/bin/env python3
"""Issue 43's cold-CPU and memory figures of one `silt bench` results.json that ran `direct` and a Silt server mode:
per query the server's cold CPU over `direct`'s process CPU (DataFusion reading the throttled store itself), and the
memory tier's bytes over the Parquet bytes of the same column chunks.

    python3 scripts/cold_cpu_table.py bench-results/clickbench/results.json [--mode liquid]
"""
import json
import math
import sys


def main():
    data = json.load(open(sys.argv[1]))
    mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "liquid"
    by = {(r["mode"], r["query"]): r for r in data["results"] if r["status"] == "ok"}
    print(f"{data['name']}: {mode} against direct")
    print(f"| query | {mode} server CPU cold s | direct CPU cold s | ratio | memory tier / Parquet |")
    print("|---|---|---|---|---|")
    ratios, memory = [], []
    for q in [q["id"] for q in data["queries"]]:
        s, d = by.get((mode, q)), by.get(("direct", q))
        if not s:
            continue
        sc = (s.get("server_cpu_s") or {}).get("cold")
        dc = ((d or {}).get("client_cpu_s") or {}).get("cold")
        m = s.get("memory") or {}
        mem = m["memory_tier_bytes"] / m["memory_tier_parquet_bytes"] if m.get("memory_tier_parquet_bytes") else None
        ratio = sc / dc if sc is not None and dc else None
        if ratio is not None:
            ratios.append(ratio)
        if mem is not None:
            memory.append(mem)
        fmt = lambda v, p: "-" if v is None else f"{v:.{p}f}"
        print(f"| {q} | {fmt(sc, 2)} | {fmt(dc, 2)} | {fmt(ratio, 2)} | {fmt(mem, 2)} |")
    g = lambda xs: math.exp(sum(math.log(max(x, 1e-9)) for x in xs) / len(xs))
    if ratios:
        print(f"\ncold CPU {mode}/direct: geomean {g(ratios):.2f}, max {max(ratios):.2f}, above 1.3x on "
              f"{sum(r > 1.3 for r in ratios)} of {len(ratios)}")
    if memory:
        print(f"memory tier / Parquet: max {max(memory):.2f}, above 1.0x on {sum(m > 1.0 for m in memory)} of {len(memory)}")


if __name__ == "__main__":
    main()
