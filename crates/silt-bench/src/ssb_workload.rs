//! FlexPushdownDB's skewed SSB workloads (`../shared/bench/ssb/WORKLOAD.md`),
//! written from that description: a batch of queries whose `lo_orderdate`
//! year follows a Zipf law, so some data is hot.
//!
//! - [`Workload::Skewed`] (FPDB's type 1, the paper's main workload): the
//!   10 SSB templates of flights 2-4 without their year filters, grouped by
//!   `d_yearmonthnum`, each with `lo_orderdate BETWEEN Y0101 AND Y1231` (Zipf
//!   year) and a lineorder filter of selectivity `s` on `lo_discount` or
//!   `lo_quantity`.
//! - [`Workload::Weighted`] (type 2, for Weighted-LFU): three two-table
//!   templates (supplier, customer or part with lineorder), alternating a
//!   selective variant (`lo_quantity = q`) that returns three columns and an
//!   unselective one (`lo_discount` outside a 2-wide window) that returns
//!   two others: columns of equal use but unequal benefit.
//!
//! A batch of `size` queries is `size / 2` distinct queries twice: a warm-up
//! half and an execution half (the measured one), each shuffled on its own.
//! Same seed, same batch.

/// Which workload ([module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Skewed,
    Weighted,
}

/// What a batch is made of.
#[derive(Debug, Clone)]
pub struct Params {
    pub workload: Workload,
    /// Queries in the batch (warm-up half + execution half).
    pub size: usize,
    /// Zipf parameter of the year (0: uniform; 2: 1992 gets 66%).
    pub theta: f64,
    /// Selectivity of the extra lineorder filter (type 1).
    pub selectivity: f64,
    pub seed: u64,
}

/// A batch: the warm-up half, then the execution half (same queries).
#[derive(Debug, Clone)]
pub struct Batch {
    pub warm_up: Vec<String>,
    pub execution: Vec<String>,
}

/// The years 1992..=1998 allocated to `n` queries by Zipf weights
/// `k^-theta` (k = 1 for 1992): year k gets round(p_k n) queries, then the
/// list is cut or padded to `n` with `pad`.
pub fn year_allocation(n: usize, theta: f64, pad: i32) -> Vec<i32> {
    let weights: Vec<f64> = (1..=7).map(|k| (k as f64).powf(-theta)).collect();
    let total: f64 = weights.iter().sum();
    let mut years = Vec::with_capacity(n);
    for (k, w) in weights.iter().enumerate() {
        let count = (w / total * n as f64).round() as usize;
        years.extend(std::iter::repeat_n(1992 + k as i32, count));
    }
    years.truncate(n);
    while years.len() < n {
        years.push(pad);
    }
    years
}

/// SplitMix64: a small, seedable generator (the workload must be the same
/// for the same seed on every machine).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.range(0, items.len() as i64 - 1) as usize]
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.range(0, i as i64) as usize;
            items.swap(i, j);
        }
    }
}

const REGIONS: [&str; 5] = ["AMERICA", "AFRICA", "MIDDLE EAST", "EUROPE", "ASIA"];
const NATIONS: [&str; 5] = ["UNITED STATES", "CHINA", "UNITED KINGDOM", "INDIA", "RUSSIA"];
const CITY_PREFIXES: [&str; 5] = ["UNITED ST", "CHINA    ", "UNITED KI", "INDIA    ", "RUSSIA   "];

fn city(rng: &mut Rng) -> String {
    format!("{}{}", rng.pick(&CITY_PREFIXES), rng.range(0, 9))
}

fn category(rng: &mut Rng) -> i64 {
    rng.range(1, 5) * 10 + rng.range(1, 5)
}

/// The extra lineorder filter of selectivity `s` (type 1).
fn row_filter(rng: &mut Rng, s: f64) -> String {
    if rng.range(0, 1) == 0 {
        let width = (10.0 * s).round() as i64;
        let lo = rng.range(0, 10 - width);
        format!("lo_discount BETWEEN {lo} AND {}", lo + width)
    } else {
        let width = (50.0 * s).round() as i64;
        let lo = rng.range(0, 50 - width);
        format!("lo_quantity BETWEEN {lo} AND {}", lo + width)
    }
}

/// One type-1 query from template `t` (0..10: Q2.1..Q4.3) for `year`.
fn skewed_query(rng: &mut Rng, t: usize, year: i32, s: f64) -> String {
    let hot = format!(
        "lo_orderdate BETWEEN {year}0101 AND {year}1231 AND {}",
        row_filter(rng, s)
    );
    let part_supp = "FROM lineorder, date, part, supplier WHERE lo_orderdate = d_datekey \
                     AND lo_partkey = p_partkey AND lo_suppkey = s_suppkey";
    let cust_supp = "FROM customer, lineorder, supplier, date WHERE lo_custkey = c_custkey \
                     AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey";
    let all = "FROM date, customer, supplier, part, lineorder WHERE lo_custkey = c_custkey \
               AND lo_suppkey = s_suppkey AND lo_partkey = p_partkey AND lo_orderdate = d_datekey";
    let flight2 = |filter: String| {
        format!(
            "SELECT sum(lo_revenue), d_yearmonthnum, p_brand1 {part_supp} AND {filter} AND {hot} \
             GROUP BY d_yearmonthnum, p_brand1 ORDER BY d_yearmonthnum, p_brand1"
        )
    };
    let flight3 = |groups: &str, filter: String| {
        format!(
            "SELECT {groups}, d_yearmonthnum, sum(lo_revenue) AS revenue {cust_supp} AND {filter} AND {hot} \
             GROUP BY {groups}, d_yearmonthnum ORDER BY d_yearmonthnum ASC, revenue DESC"
        )
    };
    let flight4 = |groups: &str, filter: String| {
        format!(
            "SELECT d_yearmonthnum, {groups}, sum(lo_revenue - lo_supplycost) AS profit {all} AND {filter} AND {hot} \
             GROUP BY d_yearmonthnum, {groups} ORDER BY d_yearmonthnum, {groups}"
        )
    };
    let mfgrs = |rng: &mut Rng| {
        format!(
            "(p_mfgr = 'MFGR#{}' OR p_mfgr = 'MFGR#{}')",
            rng.range(1, 5),
            rng.range(1, 5)
        )
    };
    match t {
        0 => flight2(format!(
            "p_category = 'MFGR#{}' AND s_region = '{}'",
            category(rng),
            rng.pick(&REGIONS)
        )),
        1 => {
            let brand = category(rng) * 100 + rng.range(10, 30);
            flight2(format!(
                "p_brand1 BETWEEN 'MFGR#{}' AND 'MFGR#{}' AND s_region = '{}'",
                brand - 3,
                brand + 4,
                rng.pick(&REGIONS)
            ))
        }
        2 => flight2(format!(
            "p_brand1 = 'MFGR#{}' AND s_region = '{}'",
            category(rng) * 100 + rng.range(10, 30),
            rng.pick(&REGIONS)
        )),
        3 => {
            let region = rng.pick(&REGIONS);
            flight3(
                "c_nation, s_nation",
                format!("c_region = '{region}' AND s_region = '{region}'"),
            )
        }
        4 => {
            let nation = rng.pick(&NATIONS);
            flight3(
                "c_city, s_city",
                format!("c_nation = '{nation}' AND s_nation = '{nation}'"),
            )
        }
        5 | 6 => {
            let (a, b) = (city(rng), city(rng));
            flight3(
                "c_city, s_city",
                format!("(c_city = '{a}' OR c_city = '{b}') AND (s_city = '{a}' OR s_city = '{b}')"),
            )
        }
        7 => {
            let region = rng.pick(&REGIONS);
            let m = mfgrs(rng);
            flight4(
                "c_nation",
                format!("c_region = '{region}' AND s_region = '{region}' AND {m}"),
            )
        }
        8 => {
            let region = rng.pick(&REGIONS);
            let m = mfgrs(rng);
            flight4(
                "s_nation, p_category",
                format!("c_region = '{region}' AND s_region = '{region}' AND {m}"),
            )
        }
        _ => flight4(
            "s_city, p_brand1",
            format!(
                "s_nation = '{}' AND p_category = 'MFGR#{}'",
                rng.pick(&NATIONS),
                category(rng)
            ),
        ),
    }
}

/// One type-2 query: template `t` (0..3), selective (`high`) or not, for `year`.
fn weighted_query(rng: &mut Rng, t: usize, high: bool, year: i32) -> String {
    let (dim, join, filter, group) = match t {
        0 => (
            "supplier",
            "lo_suppkey = s_suppkey",
            format!("s_city = '{}'", city(rng)),
            "s_name",
        ),
        1 => (
            "customer",
            "lo_custkey = c_custkey",
            format!("c_city = '{}'", city(rng)),
            "c_name",
        ),
        _ => (
            "part",
            "lo_partkey = p_partkey",
            format!("p_brand1 = 'MFGR#{}'", category(rng) * 100 + rng.range(1, 40)),
            "p_size",
        ),
    };
    let (measures, row_filter) = if high {
        (
            "sum(lo_revenue), sum(lo_supplycost), sum(lo_linenumber)",
            format!("lo_quantity = {}", rng.range(15, 35)),
        )
    } else {
        let d = rng.range(3, 6);
        (
            "sum(lo_extendedprice), sum(lo_ordtotalprice)",
            format!("(lo_discount < {d} OR lo_discount > {})", d + 1),
        )
    };
    format!(
        "SELECT {group}, {measures} FROM lineorder, {dim} WHERE {join} AND {filter} AND {row_filter} \
         AND lo_orderdate BETWEEN {year}0101 AND {year}1231 GROUP BY {group} ORDER BY {group}"
    )
}

/// The batch `params` describe ([module docs](self)).
pub fn generate(params: &Params) -> Batch {
    let mut rng = Rng(params.seed);
    let distinct = (params.size / 2).max(1);
    let pad = match params.workload {
        Workload::Skewed => 1992,
        Workload::Weighted => 1993,
    };
    let years = year_allocation(distinct, params.theta, pad);
    let queries: Vec<String> = years
        .iter()
        .enumerate()
        .map(|(i, &year)| match params.workload {
            Workload::Skewed => {
                let t = rng.range(0, 9) as usize;
                skewed_query(&mut rng, t, year, params.selectivity)
            }
            Workload::Weighted => {
                let t = rng.range(0, 2) as usize;
                weighted_query(&mut rng, t, i % 2 == 0, year)
            }
        })
        .collect();
    let mut warm_up = queries.clone();
    let mut execution = queries;
    rng.shuffle(&mut warm_up);
    rng.shuffle(&mut execution);
    Batch { warm_up, execution }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_follow_the_zipf_shares_of_the_description() {
        // WORKLOAD.md's table, theta = 2: .661 .165 .073 .041 .026 .018 .013
        // (1992 also takes the padding the rounding leaves).
        let years = year_allocation(1000, 2.0, 1992);
        let share = |y: i32| years.iter().filter(|&&x| x == y).count() as f64 / 1000.0;
        assert!((share(1992) - 0.661).abs() < 0.005, "{}", share(1992));
        assert!((share(1993) - 0.165).abs() < 0.002, "{}", share(1993));
        assert!((share(1998) - 0.013).abs() < 0.002, "{}", share(1998));
        let uniform = year_allocation(70, 0.0, 1992);
        assert!((1992..=1998).all(|y| uniform.iter().filter(|&&x| x == y).count() == 10));
        assert_eq!(year_allocation(3, 2.0, 1992).len(), 3);
    }

    #[test]
    fn a_batch_is_its_queries_twice_and_the_same_for_a_seed() {
        for workload in [Workload::Skewed, Workload::Weighted] {
            let params = Params {
                workload,
                size: 40,
                theta: 2.0,
                selectivity: 0.2,
                seed: 7,
            };
            let batch = generate(&params);
            assert_eq!(batch.warm_up.len(), 20);
            let (mut a, mut b) = (batch.warm_up.clone(), batch.execution.clone());
            a.sort();
            b.sort();
            assert_eq!(a, b);
            assert_eq!(generate(&params).execution, batch.execution);
            assert!(batch.execution.iter().all(|q| q.contains("lo_orderdate BETWEEN")));
        }
    }
}
