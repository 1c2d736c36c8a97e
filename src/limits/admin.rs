//! `dsh-plan tenants set|show`: a tenant's own limits, stored in Redis where every replica
//! reads them (within [`super::TENANT_CACHE`]). Without Redis there is nowhere to keep them:
//! every tenant has the server-wide defaults.

use std::fmt::Write;
use std::time::Duration;

use anyhow::Context;
use clap::ArgMatches;

use super::{TenantLimits, OPEN_TENANT};
use crate::config::{Settings, TenantsCommand};
use crate::domain::TenantId;
use crate::store::{LimitStore, RedisLimits, RedisLog, TenantOverrides};

/// `command` with only the limits given on `tenants set`'s command line. The server-wide
/// flags of the same names are global, so clap fills an omitted one with its default (or its
/// `DSH_*` variable), which must not become the tenant's own.
pub fn given_on_command_line(matches: &ArgMatches, command: TenantsCommand) -> TenantsCommand {
    let set = matches
        .subcommand_matches("tenants")
        .and_then(|m| m.subcommand_matches("set"));
    let given = |id: &str| {
        set.and_then(|m| m.value_source(id)) == Some(clap::parser::ValueSource::CommandLine)
    };
    match command {
        TenantsCommand::Set {
            tenant,
            retention,
            max_sessions,
            max_running_turns,
            max_provider_calls,
            max_streams,
        } => TenantsCommand::Set {
            tenant,
            retention: retention.filter(|_| given("retention")),
            max_sessions: max_sessions.filter(|_| given("max_sessions")),
            max_running_turns: max_running_turns.filter(|_| given("max_running_turns")),
            max_provider_calls: max_provider_calls.filter(|_| given("max_provider_calls")),
            max_streams: max_streams.filter(|_| given("max_streams")),
        },
        show => show,
    }
}

/// Runs a `tenants` command (limits as [`given_on_command_line`] leaves them) and returns
/// what to print.
pub async fn run(settings: &Settings, command: TenantsCommand) -> anyhow::Result<String> {
    let Some(url) = settings.redis_url.as_deref() else {
        anyhow::bail!(
            "per-tenant limits are kept in Redis: set REDIS_URL (or pass --redis-url). Without \
             Redis every tenant has the server-wide defaults (DSH_RETENTION, \
             DSH_TENANT_MAX_SESSIONS, DSH_TENANT_MAX_RUNNING_TURNS, \
             DSH_TENANT_MAX_PROVIDER_CALLS, DSH_TENANT_MAX_STREAMS)"
        );
    };
    let log = RedisLog::connect_with(url, &settings.key_prefix, settings.redis_options())
        .await
        .with_context(|| format!("connecting to Redis at {}", crate::config::redact(url)))?;
    let store = RedisLimits::new(&log);
    let tenant = match &command {
        TenantsCommand::Set { tenant, .. } | TenantsCommand::Show { tenant } => {
            TenantId::parse(tenant).map_err(anyhow::Error::msg)?
        }
    };
    if let TenantsCommand::Set {
        retention,
        max_sessions,
        max_running_turns,
        max_provider_calls,
        max_streams,
        ..
    } = command
    {
        let overrides = TenantOverrides {
            retention_ms: retention.map(|r| r.as_millis() as u64),
            max_sessions,
            max_running_turns,
            max_provider_calls,
            max_streams,
        };
        if overrides == TenantOverrides::default() {
            anyhow::bail!(
                "nothing to set: pass --retention, --max-sessions, --max-running-turns, \
                 --max-provider-calls or --max-streams"
            );
        }
        store
            .set_overrides(tenant.as_str(), &overrides)
            .await
            .context("storing the tenant's limits")?;
    }
    let overrides = store
        .overrides(tenant.as_str())
        .await
        .context("reading the tenant's limits")?;
    Ok(show(settings, &tenant, &overrides))
}

/// A tenant's effective limits, one per line, each marked as its own or the default.
pub fn show(settings: &Settings, tenant: &TenantId, o: &TenantOverrides) -> String {
    let limits = TenantLimits::from_settings(settings).with(o);
    let source = |set: Option<u64>| if set.is_some() { "tenant" } else { "default" };
    let mut out = format!("tenant {tenant}");
    if tenant.as_str() == OPEN_TENANT {
        out.push_str(" (sessions created without credentials)");
    }
    out.push('\n');
    let retention = match limits.retention {
        d if d.is_zero() => "until deleted".to_owned(),
        d => humantime::format_duration(Duration::from_secs(d.as_secs())).to_string(),
    };
    let rows = [
        ("retention", retention, source(o.retention_ms)),
        (
            "max-sessions",
            limits.max_sessions.to_string(),
            source(o.max_sessions),
        ),
        (
            "max-running-turns",
            limits.max_running_turns.to_string(),
            source(o.max_running_turns),
        ),
        (
            "max-provider-calls",
            format!("{} per minute", limits.max_provider_calls),
            source(o.max_provider_calls),
        ),
        (
            "max-streams",
            limits.max_streams.to_string(),
            source(o.max_streams),
        ),
    ];
    for (name, value, source) in rows {
        let _ = writeln!(out, "  {name:<20}{value:<20}({source})");
    }
    out
}
