//! Request metrics for `/metrics`: responses by status class and a latency histogram (time to
//! the response head; an SSE stream counts once, when it starts).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use actix_web::dev::{ServiceRequest, ServiceResponse};

use super::layers::Rest;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

#[derive(Default)]
pub struct RequestMetrics {
    /// Responses by status class, 1xx..5xx.
    by_class: [AtomicU64; 5],
    /// Cumulative counts per bucket, then +Inf.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl RequestMetrics {
    fn record(&self, status: u16, elapsed: std::time::Duration) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.by_class[class].fetch_add(1, Relaxed);
        let secs = elapsed.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.buckets[i].fetch_add(1, Relaxed);
            }
        }
        self.buckets[BUCKETS.len()].fetch_add(1, Relaxed);
        self.sum_micros
            .fetch_add(elapsed.as_micros() as u64, Relaxed);
    }

    /// The Prometheus text for these metrics.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP dsh_http_responses_total HTTP responses by status class.\n# TYPE dsh_http_responses_total counter\n",
        );
        for (i, n) in self.by_class.iter().enumerate() {
            out.push_str(&format!(
                "dsh_http_responses_total{{class=\"{}xx\"}} {}\n",
                i + 1,
                n.load(Relaxed)
            ));
        }
        out.push_str("# HELP dsh_http_response_seconds Time to the response head.\n# TYPE dsh_http_response_seconds histogram\n");
        for (i, bound) in BUCKETS.iter().enumerate() {
            out.push_str(&format!(
                "dsh_http_response_seconds_bucket{{le=\"{bound}\"}} {}\n",
                self.buckets[i].load(Relaxed)
            ));
        }
        let count = self.buckets[BUCKETS.len()].load(Relaxed);
        out.push_str(&format!(
            "dsh_http_response_seconds_bucket{{le=\"+Inf\"}} {count}\n"
        ));
        out.push_str(&format!(
            "dsh_http_response_seconds_sum {}\n",
            self.sum_micros.load(Relaxed) as f64 / 1e6
        ));
        out.push_str(&format!("dsh_http_response_seconds_count {count}\n"));
        out
    }
}

/// Middleware that records every response.
pub async fn track<B>(
    req: ServiceRequest,
    next: impl Rest<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    let metrics = req
        .app_data::<actix_web::web::Data<super::AppState>>()
        .cloned();
    let started = Instant::now();
    let res = next.call(req).await?;
    if let Some(state) = metrics {
        state
            .requests
            .record(res.status().as_u16(), started.elapsed());
    }
    Ok(res)
}
