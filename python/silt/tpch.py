"""TPC-H Q3, Q5, Q12 and Q14 as tensor programs on `torch.distributed` ranks.

Each rank scans its share of every large table from Silt (filters pushed
down, `silt.shard_predicate` on an integer column), the ranks hash-partition
rows on the join key with `all_to_all_single` (`silt.distributed`), chunk by
chunk for the probe side (lineitem) so the exchange of one chunk overlaps the
scan of the next, join on exact keys and aggregate; sums are exchanged with
`all_reduce`, Q3's top rows with `all_gather`. Money is exact: decimals
arrive as unscaled int64 (cents), `l_extendedprice * (1 - l_discount)` is
computed in units of 1e-4. Tiny tables (region, nation, and supplier for Q5)
are read whole by every rank (a broadcast by scan).

    python -m silt.tpch --server grpc://127.0.0.1:50051 --ranks 2 --query 3

`REFERENCE` holds the queries' SQL (the project's `bench/tpch/queries`
texts), which the tests run on the server (plain DataFusion) to compare.
"""

import argparse
import datetime
from decimal import Decimal
from typing import Dict, List, Optional

import torch

from . import distributed as d

I64, I32 = torch.int64, torch.int32
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
EPOCH = datetime.date(1970, 1, 1)

REFERENCE = {
    3: """select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate, o_shippriority
from customer, orders, lineitem
where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey
  and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15'
group by l_orderkey, o_orderdate, o_shippriority
order by revenue desc, o_orderdate limit 10""",
    5: """select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'AFRICA' and o_orderdate >= date '1994-01-01'
  and o_orderdate < date '1994-01-01' + interval '1' year
group by n_name
order by revenue desc""",
    12: """select l_shipmode,
  sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end) as high_line_count,
  sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH' then 1 else 0 end) as low_line_count
from orders, lineitem
where o_orderkey = l_orderkey and l_shipmode in ('FOB', 'SHIP') and l_commitdate < l_receiptdate
  and l_shipdate < l_commitdate and l_receiptdate >= date '1995-01-01'
  and l_receiptdate < date '1995-01-01' + interval '1' year
group by l_shipmode
order by l_shipmode""",
    14: """select 100.00 * sum(case when p_type like 'PROMO%' then l_extendedprice * (1 - l_discount) else 0 end)
  / sum(l_extendedprice * (1 - l_discount)) as promo_revenue
from lineitem, part
where l_partkey = p_partkey and l_shipdate >= date '1995-02-01'
  and l_shipdate < date '1995-02-01' + interval '1' month""",
}


def _revenue(chunk: Dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
    """`l_extendedprice * (1 - l_discount)` in units of 1e-4, exact."""
    return chunk["l_extendedprice"][rows] * (100 - chunk["l_discount"][rows])


def _shuffled_table(url, select, table, where, shard_by, spec, key, batch_rows, token):
    chunks = d.scan_chunks(url, select, table, where, shard_by, spec, batch_rows, token)
    return d.concat(d.shuffled(chunks, key, d.dtypes(spec)), d.dtypes(spec))


def q3(url: str, batch_rows: int = 65536, token: Optional[str] = None):
    cust_spec = {"c_custkey": I64}
    cust = _shuffled_table(url, "c_custkey", "customer", "c_mktsegment = 'BUILDING'", "c_custkey",
                           cust_spec, "c_custkey", batch_rows, token)
    ord_spec = {"o_orderkey": I64, "o_custkey": I64, "o_orderdate": I32, "o_shippriority": I32}
    kept = []
    for chunk in d.shuffled(d.scan_chunks(url, "o_orderkey, o_custkey, o_orderdate, o_shippriority", "orders",
                                          "o_orderdate < DATE '1995-03-15'", "o_orderkey", ord_spec,
                                          batch_rows, token), "o_custkey", ord_spec):
        probe, _ = d.join_unique(cust["c_custkey"], chunk["o_custkey"])
        kept.append(d.take(chunk, probe))
    orders = d.concat(d.shuffled(iter(kept), "o_orderkey", ord_spec), ord_spec)
    li_spec = {"l_orderkey": I64, "l_extendedprice": I64, "l_discount": I64}
    keys, revenues = [], []
    for chunk in d.shuffled(d.scan_chunks(url, "l_orderkey, l_extendedprice, l_discount", "lineitem",
                                          "l_shipdate > DATE '1995-03-15'", "l_partkey", li_spec, batch_rows,
                                          token), "l_orderkey", li_spec):
        probe, build = d.join_unique(orders["o_orderkey"], chunk["l_orderkey"])
        keys.append(torch.stack([orders["o_orderkey"][build], orders["o_orderdate"][build].to(I64),
                                 orders["o_shippriority"][build].to(I64)], dim=1))
        revenues.append(_revenue(chunk, probe))
    # Group by the exact composite key (l_orderkey, o_orderdate, o_shippriority):
    # all rows of an order are on this rank (partitioned by l_orderkey).
    matrix = torch.cat(keys) if keys else torch.empty((0, 3), dtype=I64)
    revenue = torch.cat(revenues) if revenues else torch.empty(0, dtype=I64)
    groups, ids = torch.unique(matrix, dim=0, return_inverse=True)
    sums = torch.zeros(len(groups), dtype=I64).index_add_(0, ids, revenue)
    local = _top(groups, sums, 10)
    everything = d.gather_rows(local, {"k": I64, "date": I64, "prio": I64, "revenue": I64})
    top = _top(torch.stack([everything["k"], everything["date"], everything["prio"]], dim=1),
               everything["revenue"], 10)
    return [(int(k), Decimal(int(r)).scaleb(-4), EPOCH + datetime.timedelta(days=int(day)), int(p))
            for k, day, p, r in zip(top["k"], top["date"], top["prio"], top["revenue"])]


def _top(groups: torch.Tensor, sums: torch.Tensor, n: int) -> Dict[str, torch.Tensor]:
    """The first `n` groups by revenue desc, then orderdate asc, then orderkey."""
    order = torch.argsort(groups[:, 0], stable=True)
    order = order[torch.argsort(groups[order, 1], stable=True)]
    order = order[torch.argsort(sums[order], descending=True, stable=True)][:n]
    return {"k": groups[order, 0], "date": groups[order, 1], "prio": groups[order, 2], "revenue": sums[order]}


def q5(url: str, batch_rows: int = 65536, token: Optional[str] = None):
    region = d.concat(d.scan_chunks(url, "r_regionkey", "region", "r_name = 'AFRICA'", None,
                                    {"r_regionkey": I64}, batch_rows, token), {"r_regionkey": I64})
    nation = d.concat(d.scan_chunks(url, "n_nationkey, n_regionkey", "nation", None, None,
                                    {"n_nationkey": I64, "n_regionkey": I64}, batch_rows, token),
                      {"n_nationkey": I64, "n_regionkey": I64})
    nations = nation["n_nationkey"][torch.isin(nation["n_regionkey"], region["r_regionkey"])]
    in_list = ", ".join(str(int(n)) for n in nations) or "NULL"
    supp_spec = {"s_suppkey": I64, "s_nationkey": I64}
    supplier = d.concat(d.scan_chunks(url, "s_suppkey, s_nationkey", "supplier", f"s_nationkey IN ({in_list})",
                                      None, supp_spec, batch_rows, token), supp_spec)
    cust_spec = {"c_custkey": I64, "c_nationkey": I64}
    cust = _shuffled_table(url, "c_custkey, c_nationkey", "customer", f"c_nationkey IN ({in_list})",
                           "c_custkey", cust_spec, "c_custkey", batch_rows, token)
    ord_spec = {"o_orderkey": I64, "o_custkey": I64}
    kept = []
    for chunk in d.shuffled(d.scan_chunks(url, "o_orderkey, o_custkey", "orders",
                                          "o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'",
                                          "o_orderkey", ord_spec, batch_rows, token), "o_custkey", ord_spec):
        probe, build = d.join_unique(cust["c_custkey"], chunk["o_custkey"])
        kept.append({"o_orderkey": chunk["o_orderkey"][probe], "c_nationkey": cust["c_nationkey"][build]})
    kept_spec = {"o_orderkey": I64, "c_nationkey": I64}
    orders = d.concat(d.shuffled(iter(kept), "o_orderkey", kept_spec), kept_spec)
    li_spec = {"l_orderkey": I64, "l_suppkey": I64, "l_extendedprice": I64, "l_discount": I64}
    size = int(nation["n_nationkey"].max()) + 1 if len(nation["n_nationkey"]) else 1
    per_nation = torch.zeros(size, dtype=I64)
    for chunk in d.shuffled(d.scan_chunks(url, "l_orderkey, l_suppkey, l_extendedprice, l_discount", "lineitem",
                                          None, "l_partkey", li_spec, batch_rows, token), "l_orderkey", li_spec):
        probe, build = d.join_unique(orders["o_orderkey"], chunk["l_orderkey"])
        c_nation = orders["c_nationkey"][build]
        probe2, sbuild = d.join_unique(supplier["s_suppkey"], chunk["l_suppkey"][probe])
        same = c_nation[probe2] == supplier["s_nationkey"][sbuild]   # c_nationkey = s_nationkey
        rows = probe[probe2[same]]
        per_nation.index_add_(0, c_nation[probe2[same]], _revenue(chunk, rows))
    d.all_sum(per_nation)
    names = _nation_names(url, token)
    result = [(names[int(n)], Decimal(int(per_nation[n])).scaleb(-4)) for n in nations.tolist()
              if per_nation[n] != 0]
    return sorted(result, key=lambda r: r[1], reverse=True)


def _nation_names(url: str, token: Optional[str]) -> Dict[int, str]:
    from .client import connect

    with connect(url, token) as conn:
        t = conn.scan("nation", ["n_nationkey", "n_name"])
    return dict(zip(t["n_nationkey"].to_pylist(), t["n_name"].to_pylist()))


def q12(url: str, batch_rows: int = 65536, token: Optional[str] = None):
    ord_spec = {"o_orderkey": I64, "o_orderpriority": PRIORITIES}
    orders = _shuffled_table(url, "o_orderkey, o_orderpriority", "orders", None, "o_custkey", ord_spec,
                             "o_orderkey", batch_rows, token)
    high = (orders["o_orderpriority"] < 2).to(I64)   # 1-URGENT, 2-HIGH
    modes = ["FOB", "SHIP"]
    li_spec = {"l_orderkey": I64, "l_shipmode": modes}
    where = ("l_shipmode IN ('FOB', 'SHIP') AND l_commitdate < l_receiptdate AND l_shipdate < l_commitdate "
             "AND l_receiptdate >= DATE '1995-01-01' AND l_receiptdate < DATE '1996-01-01'")
    counts = torch.zeros((2, 2), dtype=I64)   # [mode, high/low]
    for chunk in d.shuffled(d.scan_chunks(url, "l_orderkey, l_shipmode", "lineitem", where, "l_partkey",
                                          li_spec, batch_rows, token), "l_orderkey", d.dtypes(li_spec)):
        probe, build = d.join_unique(orders["o_orderkey"], chunk["l_orderkey"])
        mode = chunk["l_shipmode"][probe]
        h = high[build]
        counts.index_put_((mode, torch.zeros_like(mode)), h, accumulate=True)
        counts.index_put_((mode, torch.ones_like(mode)), 1 - h, accumulate=True)
    d.all_sum(counts)
    return [(m, int(counts[i, 0]), int(counts[i, 1])) for i, m in enumerate(modes) if counts[i].sum() > 0]


def q14(url: str, batch_rows: int = 65536, token: Optional[str] = None):
    part_spec = {"p_partkey": I64, "promo": I64}
    part = _shuffled_table(url, "p_partkey, CAST(p_type LIKE 'PROMO%' AS BIGINT) AS promo", "part", None,
                           "p_partkey", part_spec, "p_partkey", batch_rows, token)
    li_spec = {"l_partkey": I64, "l_extendedprice": I64, "l_discount": I64}
    sums = torch.zeros(2, dtype=I64)   # promo, total (units of 1e-4)
    for chunk in d.shuffled(d.scan_chunks(url, "l_partkey, l_extendedprice, l_discount", "lineitem",
                                          "l_shipdate >= DATE '1995-02-01' AND l_shipdate < DATE '1995-03-01'",
                                          "l_orderkey", li_spec, batch_rows, token), "l_partkey", li_spec):
        probe, build = d.join_unique(part["p_partkey"], chunk["l_partkey"])
        revenue = _revenue(chunk, probe)
        sums[0] += (revenue * part["promo"][build]).sum()
        sums[1] += revenue.sum()
    d.all_sum(sums)
    promo, total = int(sums[0]), int(sums[1])
    return {"promo": Decimal(promo).scaleb(-4), "total": Decimal(total).scaleb(-4),
            "promo_revenue": Decimal(100) * Decimal(promo) / Decimal(total) if total else None}


QUERIES = {3: q3, 5: q5, 12: q12, 14: q14}


def run_queries(url: str, queries: List[int], batch_rows: int = 65536, token: Optional[str] = None,
                with_stats: bool = False):
    """On every rank: the answers of `queries` (run one after the other);
    with `with_stats`, also `silt.distributed.EXCHANGED` summed over the ranks."""
    answers = {q: QUERIES[q](url, batch_rows, token) for q in queries}
    if not with_stats:
        return answers
    keys = sorted(d.EXCHANGED)
    totals = d.all_sum(torch.tensor([d.EXCHANGED[k] for k in keys], dtype=I64))
    return answers, dict(zip(keys, totals.tolist()))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m silt.tpch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--query", type=int, action="append", choices=sorted(QUERIES))
    parser.add_argument("--batch-rows", type=int, default=65536)
    parser.add_argument("--token")
    args = parser.parse_args(argv)
    queries = args.query or sorted(QUERIES)
    answers = d.run_local(run_queries, (args.server, queries, args.batch_rows, args.token), world=args.ranks)
    for q in queries:
        print(f"Q{q}: {answers[q]}")


if __name__ == "__main__":
    main()
