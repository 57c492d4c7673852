//! Startup time and memory of the envtest control plane (figures for docs/envtest.md).
//! Run with `cargo run --release -p rustbuilder-envtest --example measure`.

use std::time::{Duration, Instant};

use rustbuilder_envtest::TestEnv;

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

async fn measure(name: &str, runs: usize, cluster: bool) {
    let mut times = Vec::new();
    for run in 0..runs {
        let started = Instant::now();
        let env = if cluster {
            TestEnv::start_cluster().await
        } else {
            TestEnv::start().await
        };
        times.push(started.elapsed());
        if run == runs - 1 {
            tokio::time::sleep(Duration::from_secs(2)).await; // let memory settle a bit
            let mut total = 0.0;
            for (process, pid) in env.pids() {
                let rss = rss_mib(pid);
                total += rss;
                println!("{name}: {process} RSS {rss:.0} MiB");
            }
            println!("{name}: total RSS {total:.0} MiB");
        }
    }
    times.sort();
    println!(
        "{name}: start times {times:?}, median {:?}",
        times[runs / 2]
    );
}

#[tokio::main]
async fn main() {
    measure("start()", 5, false).await;
    measure("start_cluster()", 5, true).await;
}
