use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};
use dsh_plan::auth::Auth;
use dsh_plan::config::{Cli, Command, KeysCommand, Settings};
use dsh_plan::domain::{SessionId, TenantId};
use dsh_plan::startup::{open_store, Application};

/// jemalloc: under load the server spends ~13 % less CPU per request than with glibc's malloc,
/// which took ~16 % of it (README, "Benchmarks").
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            Application::build(cli.serve)
                .await?
                .run_until_signalled()
                .await?
        }
        Command::Openapi => print!("{}", dsh_plan::http::openapi_json()),
        Command::Problems => print!("{}", dsh_plan::http::problems::table()),
        Command::Keys { command } => keys(&cli.serve, command).await?,
        Command::Tenants { command } => {
            use dsh_plan::limits::admin;
            let command = admin::given_on_command_line(&matches, command);
            print!("{}", admin::run(&cli.serve, command).await?)
        }
        Command::Verify { session } => {
            let sid = SessionId::parse(&session).map_err(anyhow::Error::msg)?;
            if cli.serve.redis_url.is_none() {
                anyhow::bail!("verify reads a Redis log: set REDIS_URL or pass --redis-url");
            }
            let store = open_store(&cli.serve).await?;
            let report = dsh_plan::verify::verify(store.log.as_ref(), &sid)
                .await
                .context("reading the log")?;
            for v in &report.violations {
                println!("violation: {v}");
            }
            if !report.violations.is_empty() {
                println!(
                    "FAILED: {} violation(s) in {} events of session {sid}",
                    report.violations.len(),
                    report.events
                );
                std::process::exit(1);
            }
            println!(
                "ok: session {sid}: {} events, {} agents, no violations",
                report.events, report.agents
            );
        }
    }
    Ok(())
}

/// `dsh-plan keys …`: manage API keys in the configured store.
async fn keys(settings: &Settings, command: KeysCommand) -> anyhow::Result<()> {
    if settings.redis_url.is_none() && settings.keys_file.is_none() {
        anyhow::bail!(
            "keys live in Redis (set REDIS_URL) or, without Redis, in a file (set DSH_KEYS_FILE)"
        );
    }
    let store = open_store(settings).await?;
    match command {
        KeysCommand::Create { tenant, rate } => {
            let tenant = TenantId::parse(&tenant).map_err(anyhow::Error::msg)?;
            if tenant.as_str().starts_with('_') {
                anyhow::bail!("tenant names starting with `_` are reserved (`_open` counts the open server's use)");
            }
            let (record, key) = Auth::create_key(store.keys.as_ref(), tenant, rate)
                .await
                .context("storing the key")?;
            println!(
                "created key {} for tenant {} ({} requests/s); it is shown once, below:",
                record.id,
                record.tenant,
                record
                    .rate
                    .map_or(format!("default: {}", settings.default_rate), |r| r
                        .to_string())
            );
            println!("{key}");
        }
        KeysCommand::List => {
            println!(
                "{:<16}  {:<24}  {:>8}  {:<24}  revoked",
                "id", "tenant", "rate/s", "created"
            );
            for r in store.keys.list().await.context("listing keys")? {
                println!(
                    "{:<16}  {:<24}  {:>8}  {:<24}  {}",
                    r.id,
                    r.tenant,
                    r.rate.map_or("default".to_owned(), |r| r.to_string()),
                    timestamp(r.created_at),
                    r.revoked_at.map_or("-".to_owned(), timestamp)
                );
            }
        }
        KeysCommand::Revoke { id } => {
            let at = dsh_plan::store::now_ms();
            if !store
                .keys
                .revoke(&id, at)
                .await
                .context("revoking the key")?
            {
                anyhow::bail!("no key with id `{id}` (see `dsh-plan keys list`)");
            }
            println!(
                "revoked key {id}: every replica refuses it (and the tokens it minted) within {} s",
                dsh_plan::auth::KEY_CACHE.as_secs()
            );
        }
    }
    Ok(())
}

fn timestamp(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}
