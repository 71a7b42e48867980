//! Shared by the benchmarks: where results go, and two small SVG charts (a histogram and a
//! bar chart) written by hand, so no plotting dependency enters the build.
//!
//! Every benchmark appends its figures to `bench-results/results.md` and writes its pictures
//! beside it (the directory is `BENCH_RESULTS` when set).

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

pub fn results_dir() -> PathBuf {
    let dir = std::env::var_os("BENCH_RESULTS").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/bench-results")),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).expect("results directory");
    dir
}

/// Prints `line` and appends it to `results.md` under a heading for `bench`.
pub fn record(bench: &str, line: &str) {
    println!("{line}");
    let path = results_dir().join("results.md");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("results.md");
    let _ = writeln!(
        f,
        "- **{bench}** ({}): {line}",
        sandguard::testing::timefmt::format_rfc3339(sandguard::testing::timefmt::now_unix())
    );
}

/// A histogram of `values` (milliseconds) in `bins` bins.
pub fn histogram_svg(name: &str, title: &str, values: &[f64], bins: usize) {
    if values.is_empty() {
        return;
    }
    let max = values.iter().cloned().fold(0.0_f64, f64::max).max(1e-9);
    let width = max / bins as f64;
    let mut counts = vec![0usize; bins];
    for v in values {
        counts[((v / width) as usize).min(bins - 1)] += 1;
    }
    let bars: Vec<(String, f64)> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("{:.1}", (i as f64 + 0.5) * width), *c as f64))
        .collect();
    bar_svg(name, title, "ms", "runs", &bars);
}

/// A bar chart: one bar per (label, value).
pub fn bar_svg(name: &str, title: &str, x_label: &str, y_label: &str, bars: &[(String, f64)]) {
    let (w, h, pad) = (640.0, 360.0, 50.0);
    let top = bars.iter().map(|b| b.1).fold(0.0_f64, f64::max).max(1e-9);
    let bw = (w - 2.0 * pad) / bars.len().max(1) as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n\
         <line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{x_label}</text>\n\
         <text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">{y_label}</text>\n",
        w / 2.0,
        h - pad,
        w - pad,
        h - pad,
        w / 2.0,
        h - 10.0,
        h / 2.0,
        h / 2.0
    );
    for (i, (label, value)) in bars.iter().enumerate() {
        let bh = (h - 2.0 * pad) * value / top;
        let x = pad + i as f64 * bw;
        svg.push_str(&format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"#4a7ab8\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            x + bw * 0.1,
            h - pad - bh,
            bw * 0.8,
            x + bw / 2.0,
            h - pad + 14.0,
            x + bw / 2.0,
            h - pad - bh - 4.0,
            trim(*value)
        ));
    }
    svg.push_str("</svg>\n");
    std::fs::write(results_dir().join(format!("{name}.svg")), svg).expect("write svg");
}

fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
