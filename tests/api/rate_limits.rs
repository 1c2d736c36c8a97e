//! The per-key request rate across replicas (each with its own local share of the bucket), and
//! `dsh-plan tenants set|show`, which keeps a tenant's own limits in Redis.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_plan::config::Settings;
use dsh_plan::limits::Limits;
use dsh_plan::store::{MemoryLimits, TenantOverrides};

use crate::helpers::TestRedis;
use crate::quotas::limits_on;

/// Hammers key `k1` (at `rate` per second) from four tasks per replica for `run`; returns the
/// requests allowed in total and how long the hammering took.
async fn hammer(replicas: &[Arc<Limits>], rate: u32, run: Duration) -> (u64, Duration) {
    let allowed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for limits in replicas {
        for _ in 0..4 {
            let (limits, allowed) = (limits.clone(), allowed.clone());
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < run {
                    let d = limits.check_rate("k1", rate).await.unwrap();
                    if d.allowed {
                        allowed.fetch_add(1, Ordering::Relaxed);
                        assert_eq!(d.retry_after_secs, 0);
                    } else {
                        assert_eq!(d.remaining, 0);
                        assert!(d.retry_after_secs >= 1, "{d:?}");
                    }
                    assert_eq!(d.limit, rate);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    (allowed.load(Ordering::Relaxed), start.elapsed())
}

/// The rate holds in total: at most `rate × seconds + rate` (one second's burst), and not much
/// less either.
fn assert_within_rate(allowed: u64, took: Duration, rate: u32, run: Duration) {
    // Two more for the clocks: the bucket refills by Redis's millisecond clock from its first
    // request, which the test's own clock brackets only to within a millisecond each side.
    let ceiling = f64::from(rate) * took.as_secs_f64() + f64::from(rate) + 2.0;
    let expected = f64::from(rate) * run.as_secs_f64() + f64::from(rate);
    assert!(
        (allowed as f64) <= ceiling,
        "{allowed} requests allowed in {took:?} at {rate}/s: over the {ceiling} a single bucket allows"
    );
    assert!(
        (allowed as f64) >= 0.8 * expected,
        "{allowed} requests allowed in {took:?} at {rate}/s: far under the {expected} the rate allows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_hammering_one_key_together_stay_within_its_rate_plus_one_burst() {
    let redis = TestRedis::start().await;
    let a = limits_on(&redis, |s| s.replica_id = Some("a".into())).await;
    let b = limits_on(&redis, |s| s.replica_id = Some("b".into())).await;
    let (rate, run) = (200, Duration::from_secs(3));
    let (allowed, took) = hammer(&[a, b], rate, run).await;
    assert_within_rate(allowed, took, rate, run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_the_rate_of_a_key_holds_the_same_way_in_one_process() {
    let store = Arc::new(MemoryLimits::default());
    let settings = Settings::local(None);
    let replicas = [
        Limits::new(store.clone(), &settings),
        Limits::new(store, &settings),
    ];
    let (rate, run) = (200, Duration::from_secs(2));
    let (allowed, took) = hammer(&replicas, rate, run).await;
    assert_within_rate(allowed, took, rate, run);
}

fn tenants(redis: Option<&TestRedis>, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-plan"));
    cmd.arg("tenants").args(args).env_remove("REDIS_URL");
    if let Some(r) = redis {
        cmd.env("REDIS_URL", &r.url)
            .env("DSH_KEY_PREFIX", &r.prefix);
    }
    let out = cmd.output().expect("the dsh-plan binary runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[tokio::test]
async fn tenants_set_stores_a_tenants_own_limits_where_every_replica_reads_them() {
    let redis = TestRedis::start().await;
    let (ok, out) = tenants(
        Some(&redis),
        &[
            "set",
            "--tenant",
            "acme",
            "--retention",
            "7d",
            "--max-sessions",
            "2",
        ],
    );
    assert!(ok, "{out}");
    let (ok, shown) = tenants(Some(&redis), &["show", "--tenant", "acme"]);
    assert!(ok, "{shown}");
    let line = |name: &str| {
        shown
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {shown}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("retention"), "retention 7days (tenant)");
    assert_eq!(line("max-sessions"), "max-sessions 2 (tenant)");
    assert_eq!(line("max-streams"), "max-streams 10000 (default)");

    // A replica reads them (a fresh one: others within a few seconds).
    let limits = limits_on(&redis, |_| {}).await;
    let acme = dsh_plan::domain::TenantId::parse("acme").unwrap();
    let effective = limits.tenant_limits(Some(&acme)).await.unwrap();
    assert_eq!(effective.max_sessions, 2);
    assert_eq!(effective.retention, Duration::from_secs(7 * 24 * 3600));
    assert_eq!(
        limits.store().overrides("other").await.unwrap(),
        TenantOverrides::default()
    );

    let (ok, out) = tenants(None, &["show", "--tenant", "acme"]);
    assert!(!ok, "{out}");
    assert!(out.contains("REDIS_URL"), "says what to set: {out}");
    let (ok, out) = tenants(
        Some(&redis),
        &["set", "--tenant", "no spaces", "--max-streams", "1"],
    );
    assert!(!ok && out.contains("not a tenant name"), "{out}");
}
