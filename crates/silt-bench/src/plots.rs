//! The run's plots (SVG via `plotters`): grouped bars, one group per query
//! (or per mode), one bar per series, every chart with a title, axis
//! descriptions with units and a legend.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::results::{BenchResults, QueryResult};

/// A grouped bar chart: `groups` along x; each series has one value per group
/// (`None`: not measured, no bar).
pub struct GroupedBars<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub groups: Vec<String>,
    pub series: Vec<(String, Vec<Option<f64>>)>,
    pub log_y: bool,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

type PlotResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn plot_err<E: std::fmt::Display>(e: E) -> Box<dyn std::error::Error + Send + Sync> {
    e.to_string().into()
}

impl GroupedBars<'_> {
    /// Writes the chart to `path` as SVG.
    pub fn write_svg(&self, path: &Path) -> PlotResult<()> {
        let values: Vec<f64> = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied())
            .filter(|v| v.is_finite() && (*v > 0.0 || !self.log_y))
            .collect();
        let max = values.iter().copied().fold(0.0f64, f64::max).max(1e-9);
        let min_positive = values
            .iter()
            .copied()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let width = (160 + 60 * self.groups.len() * self.series.len().max(1) / 2).clamp(900, 1800) as u32;
        let root = SVGBackend::new(path, (width, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let n = self.groups.len().max(1) as f64;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(self.title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(55)
            .y_label_area_size(80);
        let bar_width = 0.8 / self.series.len().max(1) as f64;
        if self.log_y {
            let lo = if min_positive.is_finite() {
                min_positive / 2.0
            } else {
                1e-3
            };
            let mut chart = builder
                .build_cartesian_2d(-0.5..n - 0.5, (lo..max * 6.0).log_scale())
                .map_err(plot_err)?;
            self.mesh(&mut chart)?;
            self.bars(&mut chart, lo, bar_width)?;
            self.labels(&mut chart, lo)?;
            self.legend(&mut chart)?;
        } else {
            let mut chart = builder
                .build_cartesian_2d(-0.5..n - 0.5, 0.0..max * 1.35)
                .map_err(plot_err)?;
            self.mesh(&mut chart)?;
            self.bars(&mut chart, 0.0, bar_width)?;
            self.labels(&mut chart, 0.0)?;
            self.legend(&mut chart)?;
        }
        root.present().map_err(plot_err)?;
        Ok(())
    }

    fn mesh<'b, Y>(
        &self,
        chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>,
    ) -> PlotResult<()>
    where
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .draw()
            .map_err(plot_err)
    }

    fn bars<'b, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>,
        base: f64,
        bar_width: f64,
    ) -> PlotResult<()> {
        for (s, (name, values)) in self.series.iter().enumerate() {
            let color = PALETTE[s % PALETTE.len()];
            let left = |g: usize| g as f64 - 0.4 + s as f64 * bar_width;
            let rects = values.iter().enumerate().filter_map(|(g, v)| {
                let v = (*v)?;
                (v.is_finite() && v > base)
                    .then(|| Rectangle::new([(left(g), base), (left(g) + bar_width * 0.95, v)], color.filled()))
            });
            chart
                .draw_series(rects)
                .map_err(plot_err)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        }
        Ok(())
    }

    /// Group names under the x axis, centred on their groups.
    fn labels<'b, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>,
        base: f64,
    ) -> PlotResult<()> {
        let style = TextStyle::from(("sans-serif", 14)).pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Top,
        ));
        let texts = self
            .groups
            .iter()
            .enumerate()
            .map(|(g, name)| EmptyElement::at((g as f64, base)) + Text::new(name.clone(), (0, 8), style.clone()));
        chart.draw_series(texts).map_err(plot_err)?;
        Ok(())
    }

    fn legend<'b, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>,
    ) -> PlotResult<()> {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)
    }
}

/// One series per mode: `metric` of each query's result (None when absent or failed).
fn per_query_by_mode(results: &BenchResults, metric: impl Fn(&QueryResult) -> Option<f64>) -> GroupedBars<'static> {
    let series = results
        .config
        .modes
        .iter()
        .map(|mode| {
            let values = results
                .queries
                .iter()
                .map(|q| {
                    results
                        .results
                        .iter()
                        .find(|r| &r.mode == mode && r.query == q.id && r.status == "ok")
                        .and_then(&metric)
                })
                .collect();
            (mode.clone(), values)
        })
        .filter(|(_, values): &(String, Vec<Option<f64>>)| values.iter().any(Option::is_some))
        .collect();
    GroupedBars {
        title: "",
        x_desc: "query",
        y_desc: "",
        groups: results.queries.iter().map(|q| q.id.clone()).collect(),
        series,
        log_y: true,
    }
}

/// Writes the standard plots of a run into `dir`; returns their paths.
pub fn write_all(results: &BenchResults, dir: &Path) -> PlotResult<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut emit = |file: &str, chart: GroupedBars<'_>| -> PlotResult<()> {
        let path = dir.join(file);
        chart.write_svg(&path)?;
        written.push(path);
        Ok(())
    };
    let title = |what: &str| format!("{} ({}): {what}", results.suite, results.data.description);

    let t = title("warm latency per query (median)");
    emit(
        "latency_warm.svg",
        GroupedBars {
            title: &t,
            y_desc: "milliseconds (log scale)",
            ..per_query_by_mode(results, |r| r.warm_ms.as_ref().map(|w| w.median))
        },
    )?;
    let t = title("cold latency per query");
    emit(
        "latency_cold.svg",
        GroupedBars {
            title: &t,
            y_desc: "milliseconds (log scale)",
            ..per_query_by_mode(results, |r| r.cold_ms)
        },
    )?;
    let t = title("cache-server CPU per warm query (mean)");
    emit(
        "server_cpu.svg",
        GroupedBars {
            title: &t,
            y_desc: "CPU milliseconds (log scale)",
            ..per_query_by_mode(results, |r| r.server_cpu_s.map(|c| c.warm_mean * 1e3))
        },
    )?;
    let t = title("bytes to the client per warm query");
    emit(
        "bytes_to_client.svg",
        GroupedBars {
            title: &t,
            y_desc: "bytes (log scale)",
            ..per_query_by_mode(results, |r| r.bytes_to_client.map(|b| b.warm_median as f64))
        },
    )?;
    let t = title("cache memory per mode (largest after any query)");
    emit("memory.svg", memory_chart(results, &t))?;
    Ok(written)
}

/// x = mode; bars = memory tier, page buffer + metadata, server RSS (MiB).
fn memory_chart<'a>(results: &BenchResults, title: &'a str) -> GroupedBars<'a> {
    let modes: Vec<String> = results
        .config
        .modes
        .iter()
        .filter(|m| results.results.iter().any(|r| &r.mode == *m && r.memory.is_some()))
        .cloned()
        .collect();
    let largest = |mode: &str, f: &dyn Fn(&crate::results::MemoryUse) -> u64| -> Option<f64> {
        results
            .results
            .iter()
            .filter(|r| r.mode == mode)
            .filter_map(|r| r.memory.as_ref().map(f))
            .max()
            .map(|b| b as f64 / (1u64 << 20) as f64)
    };
    let series = vec![
        (
            "memory tier".to_string(),
            modes.iter().map(|m| largest(m, &|u| u.memory_tier_bytes)).collect(),
        ),
        (
            "page buffer + metadata".to_string(),
            modes
                .iter()
                .map(|m| largest(m, &|u| u.page_buffer_bytes + u.metadata_bytes))
                .collect(),
        ),
        (
            "process RSS".to_string(),
            modes.iter().map(|m| largest(m, &|u| u.rss_bytes)).collect(),
        ),
    ];
    GroupedBars {
        title,
        x_desc: "mode",
        y_desc: "MiB",
        groups: modes,
        series,
        log_y: false,
    }
}

/// The lookup benchmark's plots: latency percentiles and throughput per mode.
pub fn write_lookup(results: &crate::results::LookupResults, dir: &Path) -> PlotResult<Vec<PathBuf>> {
    let ok: Vec<&crate::results::LookupResult> = results.results.iter().filter(|r| r.status == "ok").collect();
    let groups: Vec<String> = ok.iter().map(|r| r.mode.clone()).collect();
    let what = format!("{}, {} clients", results.data.description, results.config.clients);
    let latency_title = format!("point-lookup latency ({what})");
    let latency = GroupedBars {
        title: &latency_title,
        x_desc: "mode",
        y_desc: "milliseconds (log scale)",
        groups: groups.clone(),
        series: vec![
            ("p50".into(), ok.iter().map(|r| Some(r.p50_ms)).collect()),
            ("p90".into(), ok.iter().map(|r| Some(r.p90_ms)).collect()),
            ("p99".into(), ok.iter().map(|r| Some(r.p99_ms)).collect()),
        ],
        log_y: true,
    };
    let throughput_title = format!("point-lookup throughput ({what})");
    let throughput = GroupedBars {
        title: &throughput_title,
        x_desc: "mode",
        y_desc: "lookups per second (log scale)",
        groups,
        series: vec![("lookups/s".into(), ok.iter().map(|r| Some(r.lookups_per_s)).collect())],
        log_y: true,
    };
    let mut written = Vec::new();
    for (file, chart) in [("lookup_latency.svg", latency), ("lookup_throughput.svg", throughput)] {
        let path = dir.join(file);
        chart.write_svg(&path)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_its_title_axis_legend_and_group_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        GroupedBars {
            title: "latency per query",
            x_desc: "query",
            y_desc: "milliseconds (log scale)",
            groups: vec!["q10".into(), "q19".into()],
            series: vec![
                ("liquid".into(), vec![Some(3.0), Some(40.0)]),
                ("direct".into(), vec![Some(300.0), None]),
            ],
            log_y: true,
        }
        .write_svg(&path)
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in [
            "latency per query",
            "query",
            "milliseconds (log scale)",
            "liquid",
            "direct",
            "q10",
            "q19",
        ] {
            assert!(svg.contains(text), "{text} missing from the SVG");
        }
        assert!(svg.matches("<rect").count() >= 3 + 2, "bars and legend swatches");
    }
}
