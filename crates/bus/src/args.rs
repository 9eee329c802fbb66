//! The bus flags shared by every service that talks to NATS (the server and the controller).
//! The controller creates the streams and buckets with these settings; the server verifies
//! they exist and uses the timing settings itself.

use std::time::Duration;

use crate::BusConfig;

/// NATS flags, flattened into a service's clap arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct BusArgs {
    /// NATS server URL(s), comma separated.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// Replicas of the JetStream streams and bucket (1 for a single NATS server, 3 for a cluster).
    #[arg(long, env = "TINK_NATS_STREAM_REPLICAS", default_value_t = 1)]
    pub stream_replicas: usize,
    /// Seconds a server replica's heartbeat counts (at least 2): the agents of a replica silent
    /// for longer are offline. Each replica stores its heartbeat every third of that.
    #[arg(long, env = "TINK_PRESENCE_TTL_SECONDS", default_value_t = 30)]
    pub presence_ttl_seconds: u64,
    /// Seconds a server waits for an agent's receipt of a command before it hands the command
    /// back (redelivered on the agent's next stream) and ends the agent's stream.
    #[arg(long, env = "TINK_RECEIPT_TIMEOUT_SECONDS", default_value_t = 30)]
    pub receipt_timeout_seconds: u64,
    /// The most bytes the events stream keeps (oldest dropped first).
    #[arg(long, env = "TINK_EVENTS_MAX_BYTES", default_value_t = 1 << 30)]
    pub events_max_bytes: i64,
    /// Seconds events are kept.
    #[arg(long, env = "TINK_EVENTS_MAX_AGE_SECONDS", default_value_t = 7 * 24 * 3600)]
    pub events_max_age_seconds: u64,
    /// The most bytes the dispatch stream keeps (oldest dropped first).
    #[arg(long, env = "TINK_DISPATCH_MAX_BYTES", default_value_t = 256 << 20)]
    pub dispatch_max_bytes: i64,
    /// Seconds an undelivered command is kept.
    #[arg(long, env = "TINK_DISPATCH_MAX_AGE_SECONDS", default_value_t = 24 * 3600)]
    pub dispatch_max_age_seconds: u64,
    /// Seconds between two reads of an idle agent's command queue by its server, besides the
    /// reads every announced command causes (a backstop for a lost announcement).
    #[arg(long, env = "TINK_DISPATCH_RECHECK_SECONDS", default_value_t = 300)]
    pub dispatch_recheck_seconds: u64,
    /// NATS credentials file (JWT and NKey seed, as `nsc` writes it).
    #[arg(long, env = "NATS_CREDS")]
    pub nats_creds: Option<std::path::PathBuf>,
    /// File holding a NATS NKey seed.
    #[arg(long, env = "NATS_NKEY_SEED_FILE")]
    pub nats_nkey_seed_file: Option<std::path::PathBuf>,
    /// NATS user (with --nats-password).
    #[arg(long, env = "NATS_USER", requires = "nats_password")]
    pub nats_user: Option<String>,
    /// NATS password.
    #[arg(
        long,
        env = "NATS_PASSWORD",
        requires = "nats_user",
        hide_env_values = true
    )]
    pub nats_password: Option<String>,
    /// CA certificate (PEM) of the NATS servers; turns TLS on.
    #[arg(long, env = "NATS_TLS_CA")]
    pub nats_tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for NATS mutual TLS.
    #[arg(long, env = "NATS_TLS_CERT", requires = "nats_tls_key")]
    pub nats_tls_cert: Option<std::path::PathBuf>,
    /// Key of the NATS client certificate (PEM).
    #[arg(long, env = "NATS_TLS_KEY", requires = "nats_tls_cert")]
    pub nats_tls_key: Option<std::path::PathBuf>,
    /// Seconds in which a re-published message with the same id is dropped as a duplicate.
    #[arg(long, env = "TINK_DUPLICATE_WINDOW_SECONDS", default_value_t = 120)]
    pub duplicate_window_seconds: u64,
    /// The most bytes the logs stream (action output) keeps (oldest dropped first).
    #[arg(long, env = "TINK_LOGS_MAX_BYTES", default_value_t = 1 << 30)]
    pub logs_max_bytes: i64,
    /// Seconds action output is kept.
    #[arg(long, env = "TINK_LOGS_MAX_AGE_SECONDS", default_value_t = 7 * 24 * 3600)]
    pub logs_max_age_seconds: u64,
    /// The most bytes the dispatch targets bucket keeps (dispatch id -> agent id; entries
    /// expire after a day, new ones are refused while it is full). Used by the controller,
    /// which creates the bucket.
    #[arg(long, env = "TINK_DISPATCH_TARGETS_MAX_BYTES", default_value_t = 64 << 20)]
    pub dispatch_targets_max_bytes: i64,
    /// The most bytes the inventory stream keeps (the latest hardware inventory of each agent;
    /// the oldest go first when full). Used by the controller, which creates the stream.
    #[arg(long, env = "TINK_INVENTORY_MAX_BYTES", default_value_t = 1 << 30)]
    pub inventory_max_bytes: i64,
}

impl BusArgs {
    /// The NATS credentials and TLS settings these flags describe.
    pub fn nats_auth(&self) -> crate::NatsAuth {
        crate::NatsAuth {
            credentials_file: self.nats_creds.clone(),
            nkey_seed_file: self.nats_nkey_seed_file.clone(),
            user: self.nats_user.clone(),
            password: self.nats_password.clone(),
            tls_ca: self.nats_tls_ca.clone(),
            tls_cert: self.nats_tls_cert.clone(),
            tls_key: self.nats_tls_key.clone(),
        }
    }

    /// The bus configuration these flags describe (defaults for everything else).
    pub fn bus_config(&self) -> BusConfig {
        let presence_ttl = Duration::from_secs(self.presence_ttl_seconds.max(2));
        BusConfig {
            replicas: self.stream_replicas,
            presence_ttl,
            presence_heartbeat: presence_ttl / 3,
            receipt_timeout: Duration::from_secs(self.receipt_timeout_seconds.max(1)),
            events_max_bytes: self.events_max_bytes.max(1 << 20),
            events_max_age: Duration::from_secs(self.events_max_age_seconds.max(60)),
            dispatch_max_bytes: self.dispatch_max_bytes.max(1 << 20),
            dispatch_max_age: Duration::from_secs(self.dispatch_max_age_seconds.max(60)),
            dispatch_recheck: Duration::from_secs(self.dispatch_recheck_seconds.max(1)),
            duplicate_window: Duration::from_secs(self.duplicate_window_seconds.max(1)),
            logs_max_bytes: self.logs_max_bytes.max(1 << 20),
            logs_max_age: Duration::from_secs(self.logs_max_age_seconds.max(60)),
            dispatch_targets_max_bytes: self.dispatch_targets_max_bytes.max(1 << 20),
            inventory_max_bytes: self.inventory_max_bytes.max(4 << 20),
            ..BusConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bus: BusArgs,
    }

    #[test]
    fn flags_become_the_bus_config() {
        let cli = Cli::parse_from(["x", "--stream-replicas", "3", "--presence-ttl-seconds", "1"]);
        let config = cli.bus.bus_config();
        assert_eq!(config.replicas, 3);
        assert_eq!(
            config.presence_ttl,
            Duration::from_secs(2),
            "raised to the minimum"
        );
        assert_eq!(config.presence_heartbeat, Duration::from_secs(2) / 3);
        assert_eq!(
            config.dispatch_max_age,
            BusConfig::default().dispatch_max_age
        );
        assert_eq!(cli.bus.nats_url, "nats://127.0.0.1:4222");
    }
}
