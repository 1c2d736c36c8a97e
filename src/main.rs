use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};
use dsh_plan::config::{Cli, Command};
use dsh_plan::domain::SessionId;
use dsh_plan::startup::{open_store, Application};

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
        Command::Keys { .. } => anyhow::bail!("not built yet"),
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
