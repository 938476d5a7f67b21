//! The crate boundaries of the design (§2), read from `cargo metadata`:
//! `thund-dataflows` knows no SQL and no Arrow, `thund-checkpoint` knows no
//! timely, and the library builds without the CLI's dependencies.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use serde_json::Value;

/// Package name → names of everything it depends on (normal and build
/// dependencies, transitively), for the workspace as resolved.
fn closures(features: &[&str]) -> HashMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .args(features)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("id"),
                p["name"].as_str().expect("name"),
            )
        })
        .collect();
    let edges: HashMap<&str, Vec<&str>> = meta["resolve"]["nodes"]
        .as_array()
        .expect("resolve")
        .iter()
        .map(|n| {
            let deps = n["deps"]
                .as_array()
                .expect("deps")
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .expect("dep_kinds")
                        .iter()
                        .any(|k| k["kind"].as_str() != Some("dev"))
                })
                .map(|d| d["pkg"].as_str().expect("pkg"))
                .collect();
            (n["id"].as_str().expect("id"), deps)
        })
        .collect();
    let mut out = HashMap::new();
    for (id, name) in &names {
        let mut seen = BTreeSet::new();
        let mut todo = vec![*id];
        while let Some(x) = todo.pop() {
            for d in edges.get(x).into_iter().flatten() {
                if seen.insert(names[d].to_string()) {
                    todo.push(d);
                }
            }
        }
        out.insert(name.to_string(), seen);
    }
    out
}

fn offenders<'a>(deps: &'a BTreeSet<String>, prefixes: &[&str]) -> Vec<&'a str> {
    deps.iter()
        .map(|d| d.as_str())
        .filter(|d| {
            prefixes
                .iter()
                .any(|p| d == p || d.starts_with(&format!("{p}-")))
        })
        .collect()
}

#[test]
fn dataflows_knows_no_sql_and_checkpoint_knows_no_timely() {
    let all = closures(&[]);
    let dataflows = &all["thund-dataflows"];
    assert!(dataflows.contains("differential-dataflow"), "{dataflows:?}");
    assert_eq!(
        offenders(dataflows, &["datafusion", "arrow", "parquet", "sqlparser"]),
        Vec::<&str>::new(),
        "thund-dataflows must not depend on DataFusion or Arrow"
    );
    let checkpoint = &all["thund-checkpoint"];
    assert!(checkpoint.contains("object_store"), "{checkpoint:?}");
    assert_eq!(
        offenders(
            checkpoint,
            &["timely", "differential-dataflow", "datafusion"]
        ),
        Vec::<&str>::new(),
        "thund-checkpoint must not depend on timely, differential or DataFusion"
    );
}

#[test]
fn the_library_alone_pulls_no_cli_dependencies() {
    // `cargo metadata` resolves features for the whole workspace; ask for the
    // root package without its default features
    let lib = closures(&["--no-default-features"]);
    assert_eq!(
        offenders(&lib["thund"], &["clap", "indicatif"]),
        Vec::<&str>::new(),
        "thund without default features must not pull the CLI's dependencies"
    );
    let with_cli = closures(&[]);
    assert!(
        with_cli["thund"].contains("clap"),
        "the `cli` feature brings clap"
    );
}
