//! Peak memory of `thund run` as its input grows: the same view over 1 M
//! and 8 M rows, from CSV and from Parquet, each run as its own process (the
//! `thund` binary of this build, or `THUND_BIN`), which prints its peak RSS
//! (`VmHWM`) on its last line. Inputs are streamed a chunk per trigger, so
//! the 8 M run may use at most 1.15 × the memory of the 1 M run.
//!
//! ```text
//! cargo bench --bench peak_rss                       # 1 M and 8 M rows
//! THUND_RSS_ROWS=200000,1600000 cargo bench --bench peak_rss
//! THUND_BIN=/path/to/other/thund cargo bench --bench peak_rss   # another build
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

#[path = "../tests/suite/common/rng.rs"]
mod rng;
use rng::SplitMix;

const VIEW: &str = r#"
name = "bids_per_auction"
sql = "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume, MAX(price) AS top FROM bids GROUP BY auction"
output = "append"
[[source]]
name = "bids"
event_time = "ts"
[watermark]
allowed_lateness = "1s"
[window]
kind = "tumbling"
size = "10s"
"#;

/// Row `i` of the stream: 1 000 auctions, 1 ms of event time per row, up to
/// 500 ms of disorder.
fn row(r: &mut SplitMix, i: u64) -> (i64, i64, i64) {
    (
        r.below(1000) as i64,
        1 + r.below(10_000) as i64,
        1_000_000 + i as i64 - r.below(500) as i64,
    )
}

fn write_csv(path: &Path, rows: u64) {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    writeln!(w, "auction,price,ts").expect("write");
    let mut r = SplitMix::new(1);
    for i in 0..rows {
        let (a, p, t) = row(&mut r, i);
        writeln!(w, "{a},{p},{t}").expect("write");
    }
    w.flush().expect("flush");
}

fn write_parquet(path: &Path, rows: u64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
    ]));
    let file = std::fs::File::create(path).expect("create");
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).expect("writer");
    let mut r = SplitMix::new(1);
    let mut i = 0;
    while i < rows {
        let n = (rows - i).min(65_536);
        let (mut a, mut p, mut t) = (Vec::new(), Vec::new(), Vec::new());
        for j in i..i + n {
            let (x, y, z) = row(&mut r, j);
            a.push(x);
            p.push(y);
            t.push(z);
        }
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(a)),
                Arc::new(Int64Array::from(p)),
                Arc::new(Int64Array::from(t)),
            ],
        )
        .expect("batch");
        w.write(&b).expect("write");
        i += n;
    }
    w.close().expect("close");
}

/// Run `thund run` over `input`; its peak RSS in MB, from its summary line.
fn peak_mb(bin: &Path, dir: &Path, input: &Path) -> f64 {
    let started = Instant::now();
    let out = Command::new(bin)
        .args(["run", "--view"])
        .arg(dir.join("v.toml"))
        .arg("--input")
        .arg(format!("bids={}", input.display()))
        .arg("--output")
        .arg(dir.join("out.csv"))
        .output()
        .expect("run thund");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "thund run failed: {err}");
    let last = err.lines().last().unwrap_or_default();
    let mb = last
        .split("peak RSS ")
        .nth(1)
        .and_then(|s| s.trim_end_matches(" MB").parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no peak RSS in: {last}"));
    eprintln!(
        "  {} in {:.1} s: {last}",
        input.display(),
        started.elapsed().as_secs_f64()
    );
    mb
}

fn main() {
    let bin: PathBuf = std::env::var_os("THUND_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_thund")));
    let sizes: Vec<u64> = std::env::var("THUND_RSS_ROWS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000_000, 8_000_000]);
    assert!(sizes.len() >= 2, "THUND_RSS_ROWS needs two sizes");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("v.toml"), VIEW).expect("view");
    println!("peak RSS of `thund run` ({})", bin.display());
    let mut failed = false;
    for format in ["csv", "parquet"] {
        let mut peaks = Vec::new();
        for &n in &sizes {
            let input = dir.path().join(format!("bids-{n}.{format}"));
            if format == "csv" {
                write_csv(&input, n);
            } else {
                write_parquet(&input, n);
            }
            peaks.push(peak_mb(&bin, dir.path(), &input));
            std::fs::remove_file(&input).expect("remove input");
        }
        let ratio = peaks[peaks.len() - 1] / peaks[0];
        let ok = ratio <= 1.15;
        failed |= !ok;
        println!(
            "{format:>8}: {} -> ratio {ratio:.3} ({})",
            sizes
                .iter()
                .zip(&peaks)
                .map(|(n, p)| format!("{n} rows {p:.1} MB"))
                .collect::<Vec<_>>()
                .join(", "),
            if ok { "<= 1.15, ok" } else { "> 1.15, FAILS" }
        );
    }
    assert!(!failed, "peak RSS grows with the input");
}
