//! The ceiling a write can reach on this machine: a bare actix-web server whose `PUT
//! /v1/sessions/{sid}/agents/{aid}/plan` does one `XADD` to the session's stream and answers
//! a small JSON body — no fold, no decision, no compare-and-append, no auth, no limits. The
//! group-commit benchmark (`k6/bench-ceiling.sh`) runs the same wrk load against it and against
//! dsh-plan, side by side, and reports dsh-plan's share of this ceiling.
//!
//! `REDIS_URL` names one node (`redis://…`) or a cluster (`redis+cluster://h:p,h:p`);
//! `BIND` the address; `WORKERS` the actix workers (as `DSH_WORKERS`).

use actix_web::{put, web, App, HttpResponse, HttpServer};
use redis::aio::ConnectionLike;

/// The same allocator as dsh-plan's (src/main.rs), so the share compares the servers' work,
/// not their allocators (jemalloc makes this server ~10 % faster too).
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Clone)]
enum Conn {
    Single(redis::aio::ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    async fn xadd(&self, key: String, agent: &str, active: bool) -> redis::RedisResult<()> {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(key)
            .arg("*")
            .arg("type")
            .arg("plan/mode")
            .arg("agent")
            .arg(agent)
            .arg("data")
            .arg(if active {
                r#"{"active":true}"#
            } else {
                r#"{"active":false}"#
            });
        let _: redis::Value = match self.clone() {
            Self::Single(mut c) => c.req_packed_command(&cmd).await?,
            Self::Cluster(mut c) => c.req_packed_command(&cmd).await?,
        };
        Ok(())
    }
}

#[derive(serde::Deserialize)]
struct Target {
    active: bool,
}

#[put("/v1/sessions/{sid}/agents/{aid}/plan")]
async fn put_plan(
    conn: web::Data<Conn>,
    path: web::Path<(String, String)>,
    body: web::Json<Target>,
) -> HttpResponse {
    let (sid, aid) = path.into_inner();
    match conn
        .xadd(format!("ceiling:{{{sid}}}:log"), &aid, body.active)
        .await
    {
        Ok(()) => HttpResponse::Ok().json(serde_json::json!({"outcome": "committed"})),
        Err(_) => HttpResponse::ServiceUnavailable().finish(),
    }
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:8090".into());
    let conn = match url.strip_prefix("redis+cluster://") {
        Some(nodes) => {
            let nodes: Vec<String> = nodes.split(',').map(|n| format!("redis://{n}")).collect();
            let client = redis::cluster::ClusterClient::new(nodes).expect("cluster nodes");
            Conn::Cluster(client.get_async_connection().await.expect("cluster"))
        }
        None => {
            let client = redis::Client::open(url.as_str()).expect("a redis URL");
            Conn::Single(
                redis::aio::ConnectionManager::new(client)
                    .await
                    .expect("redis"),
            )
        }
    };
    let data = web::Data::new(conn);
    let mut server = HttpServer::new(move || App::new().app_data(data.clone()).service(put_plan));
    if let Some(n) = std::env::var("WORKERS").ok().and_then(|w| w.parse().ok()) {
        server = server.workers(n);
    }
    server.bind(bind)?.run().await
}
