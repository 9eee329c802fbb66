//! The bus flags shared by every service that talks to NATS (the server and the controller), so
//! both create the streams and bucket with the same settings.

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
    /// Seconds an agent's presence entry lives without a heartbeat (at least 2); servers refresh
    /// it every third of that.
    #[arg(long, env = "TINK_PRESENCE_TTL_SECONDS", default_value_t = 30)]
    pub presence_ttl_seconds: u64,
}

impl BusArgs {
    /// The bus configuration these flags describe (defaults for everything else).
    pub fn bus_config(&self) -> BusConfig {
        let presence_ttl = Duration::from_secs(self.presence_ttl_seconds.max(2));
        BusConfig {
            replicas: self.stream_replicas,
            presence_ttl,
            presence_heartbeat: presence_ttl / 3,
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
