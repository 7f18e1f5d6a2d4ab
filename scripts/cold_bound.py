import json, sys
d = json.load(open(sys.argv[1]))
mbps = d['config']['store_mbps']; lat = d['config']['store_latency_ms']
by = {}
for x in d['results']:
    by.setdefault(x['query'], {})[x['mode']] = x
# The bound counts no computing; Silt's warm time (the query's compute on
# cached data, no fetching) added to it is what a cold run would take with
# nothing overlapped: the last column shows how close a run comes to that.
print("| query | direct ms | Silt ms | Silt/direct | direct MB | Silt MB | bytes Silt/direct | Silt GETs | bound ms (MB/bw + 3 rounds) | Silt/bound | Silt warm ms | Silt/(bound + warm) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
worse_t = worse_b = 0; n = 0; within = 0; within_warm = 0
for q in sorted(by):
    dr, lq = by[q]['direct'], by[q]['liquid']
    db, lb = dr['object_store']['cold_bytes'], lq['object_store']['cold_bytes']
    bound = lb / (mbps * 1e6) * 1000 + 3 * lat
    n += 1
    worse_t += lq['cold_ms'] > dr['cold_ms']
    worse_b += lb > db
    within += lq['cold_ms'] <= 1.2 * bound
    warm = lq['warm_ms']['median']
    within_warm += lq['cold_ms'] <= 1.2 * (bound + warm)
    print(f"| {q} | {dr['cold_ms']:.0f} | {lq['cold_ms']:.0f} | {lq['cold_ms']/dr['cold_ms']:.2f} | {db/1e6:.1f} | {lb/1e6:.1f} | {lb/max(db,1):.2f} | {lq['object_store']['cold_requests']} | {bound:.0f} | {lq['cold_ms']/bound:.2f} | {warm:.0f} | {lq['cold_ms']/(bound + warm):.2f} |")
print(f"\n{n} queries: Silt slower than direct on {worse_t}, more bytes on {worse_b}; within 1.2x of the bound on {within}; within 1.2x of the bound plus the warm time on {within_warm}.")
