#!/usr/bin/env python3
"""The issue-39 target table of one `silt bench` results.json: per query the
`silt` mode's warm median over the best fixed mode's, and its link bytes
over the smallest fixed mode's.

    python3 scripts/decide_table.py bench-results/tpch-sf1/results.json [--fixed a,b,c] [--cold-ref other.json] \
        [--silt silt.json]

`--silt`: take the `silt` mode's results from another run (a later build of the client against the fixed modes of
this run; the fixed modes use no client cache, so a client change does not move them).

Besides the table: the `silt` geomean over the best single fixed mode's geomean, over `local`'s (when the run
has it), and its cold runs against `direct`'s (from this run, or from `--cold-ref`: `direct` crosses no link, so
one run of it serves the runs at every link).
"""
import json
import math
import sys

FIXED = ["file-server", "parquet-pushdown", "arrow-pushdown", "liquid", "caching-only"]


def main():
    path = sys.argv[1]
    fixed = FIXED
    if "--fixed" in sys.argv:
        fixed = sys.argv[sys.argv.index("--fixed") + 1].split(",")
    data = json.load(open(path))
    by = {}
    cold = {}
    for r in data["results"]:
        if r["status"] == "ok" and r.get("warm_ms"):
            by[(r["mode"], r["query"])] = r
        if r["status"] == "ok" and r.get("cold_ms") is not None:
            cold[(r["mode"], r["query"])] = r["cold_ms"]
    if "--silt" in sys.argv:
        other = json.load(open(sys.argv[sys.argv.index("--silt") + 1]))
        by = {k: v for k, v in by.items() if k[0] != "silt"}
        cold = {k: v for k, v in cold.items() if k[0] != "silt"}
        for r in other["results"]:
            if r["mode"] == "silt" and r["status"] == "ok":
                if r.get("warm_ms"):
                    by[("silt", r["query"])] = r
                if r.get("cold_ms") is not None:
                    cold[("silt", r["query"])] = r["cold_ms"]
    if "--cold-ref" in sys.argv:
        ref = json.load(open(sys.argv[sys.argv.index("--cold-ref") + 1]))
        for r in ref["results"]:
            if r["mode"] == "direct" and r["status"] == "ok" and r.get("cold_ms") is not None:
                cold[("direct", r["query"])] = r["cold_ms"]
    queries = [q["id"] for q in data["queries"]]
    link = data["config"].get("link", {}).get("given", "none")
    print(f"{data['name']}: link {link}, validation {data['config'].get('validation', '?')}")
    print(f"| query | silt ms | best fixed | best ms | silt/best | silt link bytes / smallest |")
    print("|---|---|---|---|---|---|")
    ratios, silt_all, best_all, byte_ratios, above = [], [], [], [], 0
    for q in queries:
        s = by.get(("silt", q))
        fx = [(m, by[(m, q)]) for m in fixed if (m, q) in by]
        if not s or not fx:
            print(f"| {q} | - | - | - | - | - |")
            continue
        sm = s["warm_ms"]["median"]
        bm, br = min(fx, key=lambda x: x[1]["warm_ms"]["median"])
        best = br["warm_ms"]["median"]
        ratio = sm / best
        ratios.append(ratio)
        silt_all.append(sm)
        best_all.append(best)
        above += ratio > 1.05

        def lb(r):
            v = (r.get("link_bytes") or {}).get("warm_median")
            if v is None:
                v = (r.get("bytes_to_client") or {}).get("warm_median")
            return v
        sb = lb(s)
        fb = [lb(r) for _, r in fx if lb(r) is not None]
        bratio = (sb / max(min(fb), 1)) if sb is not None and fb else None
        if bratio is not None:
            byte_ratios.append(bratio)
        bstr = f"{bratio:.2f}" if bratio is not None else "-"
        print(f"| {q} | {sm:.1f} | {bm} | {best:.1f} | {ratio:.2f} | {bstr} |")
    if ratios:
        g = lambda xs: math.exp(sum(math.log(max(x, 1e-9)) for x in xs) / len(xs))
        print(f"\nsilt/best-per-query: geomean {g(ratios):.2f}, max {max(ratios):.2f}, above 1.05x on {above} of {len(ratios)}")
        # Against each single fixed mode's geomean.
        per_mode = {}
        for m in fixed + ["local"]:
            ms = [by[(m, q)]["warm_ms"]["median"] for q in queries if (m, q) in by and ("silt", q) in by]
            ss = [by[("silt", q)]["warm_ms"]["median"] for q in queries if (m, q) in by and ("silt", q) in by]
            if ms:
                per_mode[m] = g(ss) / g(ms)
                print(f"  silt geomean / {m} geomean: {per_mode[m]:.2f}")
        single = {m: r for m, r in per_mode.items() if m in fixed}
        if single:
            m = max(single, key=single.get)
            print(f"silt geomean / best single fixed mode's geomean ({m}): {single[m]:.2f}")
        pairs = [(q, cold[("silt", q)], cold[("direct", q)]) for q in queries
                 if ("silt", q) in cold and ("direct", q) in cold]
        if pairs:
            slower = [f"{q} {s:.0f}/{d:.0f}" for q, s, d in pairs if s > d]
            print(f"cold silt/direct: geomean {g([s / d for _, s, d in pairs]):.2f}, "
                  f"slower on {len(slower)} of {len(pairs)}" + (f" ({', '.join(slower)} ms)" if slower else ""))
        if byte_ratios:
            print(f"link bytes silt/smallest fixed: max {max(byte_ratios):.2f}, above 1.1x on {sum(b > 1.1 for b in byte_ratios)} of {len(byte_ratios)}")


if __name__ == "__main__":
    main()
