//! The command line: `volume-health-webhook serve [flags]`, every flag also read from an
//! environment variable `VOLUME_HEALTH_<FLAG>`.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::enforcement::EnforcementAction;
use crate::gates::FeatureGates;
use crate::handlers::Settings;
use crate::server::{CertSource, ServeConfig};
use crate::telemetry::LogFormat;
use crate::tls::CertificateFiles;

/// Admission and authorization webhooks for Kubernetes volume health (KEP-1432).
#[derive(Debug, Parser)]
#[command(name = "volume-health-webhook", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve /mutate, /validate and /authorize over TLS, and health on a plain-HTTP port.
    Serve(ServeArgs),
}

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of both ports.
    #[arg(long, env = "VOLUME_HEALTH_BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// TLS port of /mutate, /validate and /authorize.
    #[arg(long, env = "VOLUME_HEALTH_SECURE_PORT", default_value_t = 8443)]
    pub secure_port: u16,
    /// Plain-HTTP port of /healthz, /readyz and /metrics.
    #[arg(long, env = "VOLUME_HEALTH_HEALTH_PORT", default_value_t = 8080)]
    pub health_port: u16,
    /// Serving certificate chain (PEM), re-read when it changes. Without it and the key, a
    /// certificate for localhost is generated.
    #[arg(
        long,
        env = "VOLUME_HEALTH_TLS_CERT_FILE",
        requires = "tls_private_key_file"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of the serving certificate.
    #[arg(
        long,
        env = "VOLUME_HEALTH_TLS_PRIVATE_KEY_FILE",
        requires = "tls_cert_file"
    )]
    pub tls_private_key_file: Option<PathBuf>,
    /// Require client certificates signed by a CA in this bundle (PEM).
    #[arg(long, env = "VOLUME_HEALTH_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Where to write the generated CA (PEM) when no certificate is given.
    #[arg(long, env = "VOLUME_HEALTH_SELF_SIGNED_CA_FILE")]
    pub self_signed_ca_file: Option<PathBuf>,
    /// Feature gates, as Kubernetes components take them: `CSIVolumeHealth=true|false`.
    #[arg(
        long,
        env = "VOLUME_HEALTH_FEATURE_GATES",
        default_value = "CSIVolumeHealth=false"
    )]
    pub feature_gates: FeatureGates,
    /// Explicitly deny a node's request for another node's CSINode, so that no later
    /// authorizer can grant it (otherwise: no opinion).
    #[arg(long, env = "VOLUME_HEALTH_AUTHZ_DENY_ON_MISMATCH")]
    pub authz_deny_on_mismatch: bool,
    /// Usernames allowed to change PVC status.healthStatus (comma-separated); empty: any
    /// user but nodes.
    #[arg(long, env = "VOLUME_HEALTH_PVC_HEALTH_WRITERS", value_delimiter = ',')]
    pub pvc_health_writers: Vec<String>,
    /// What /validate does with a review that field validation refuses: `deny` it, allow it
    /// with the errors as warnings (`warn`), or allow it and only log and count it (`dryrun`).
    /// Node restriction always denies.
    #[arg(long, env = "VOLUME_HEALTH_ENFORCEMENT_ACTION", value_enum, default_value_t = EnforcementAction::Deny)]
    pub enforcement_action: EnforcementAction,
    /// Largest request body; an UPDATE review carries two objects.
    #[arg(long, env = "VOLUME_HEALTH_MAX_REQUEST_BYTES", default_value_t = 7 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Log line format.
    #[arg(long, env = "VOLUME_HEALTH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Time allowed for the TLS handshake and each request's headers; a keep-alive connection
    /// (HTTP/1.1 or h2) that sends no new request for this long is closed.
    #[arg(long, env = "VOLUME_HEALTH_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// Time allowed to receive a request's body (the answer follows without waiting).
    #[arg(long, env = "VOLUME_HEALTH_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Most connections served at once on each port; further ones wait in the listen backlog.
    #[arg(long, env = "VOLUME_HEALTH_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// After SIGTERM, keep accepting this long (readiness already failing).
    #[arg(long, env = "VOLUME_HEALTH_SHUTDOWN_DELAY", default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,
    /// Then wait at most this long for in-flight requests.
    #[arg(long, env = "VOLUME_HEALTH_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,
    /// How often the certificate files are checked for changes.
    #[arg(long, env = "VOLUME_HEALTH_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub tls_reload_interval: Duration,
}

impl ServeArgs {
    /// The server configuration these flags describe.
    pub fn into_config(self) -> ServeConfig {
        let writers: HashSet<String> = self
            .pvc_health_writers
            .into_iter()
            .map(|w| w.trim().to_owned())
            .filter(|w| !w.is_empty())
            .collect();
        let certs = match (self.tls_cert_file, self.tls_private_key_file) {
            (Some(cert), Some(key)) => CertSource::Files(CertificateFiles { cert, key }),
            _ => CertSource::SelfSigned {
                ca_file: self.self_signed_ca_file,
            },
        };
        ServeConfig {
            bind_address: self.bind_address,
            secure_port: self.secure_port,
            health_port: self.health_port,
            certs,
            client_ca_file: self.client_ca_file,
            tls_reload_interval: self.tls_reload_interval,
            settings: Settings {
                gates: self.feature_gates,
                authz_deny_on_mismatch: self.authz_deny_on_mismatch,
                pvc_health_writers: (!writers.is_empty()).then_some(writers),
                enforcement_action: self.enforcement_action,
                max_request_bytes: self.max_request_bytes,
                request_timeout: self.request_timeout,
            },
            header_read_timeout: self.header_read_timeout,
            max_connections: self.max_connections,
            shutdown_delay: self.shutdown_delay,
            shutdown_timeout: self.shutdown_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("volume-health-webhook").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_match_the_spec() {
        let Command::Serve(args) = parse(&["serve"]).unwrap().command;
        let config = args.into_config();
        assert_eq!(config.secure_port, 8443);
        assert_eq!(config.health_port, 8080);
        assert_eq!(config.settings.max_request_bytes, 7 * 1024 * 1024);
        assert!(
            !config.settings.gates.csi_volume_health,
            "alpha gate off by default"
        );
        assert!(config.settings.pvc_health_writers.is_none());
        assert!(matches!(
            config.certs,
            CertSource::SelfSigned { ca_file: None }
        ));
    }

    #[test]
    fn hardening_defaults_and_flags() {
        let Command::Serve(args) = parse(&["serve"]).unwrap().command;
        let config = args.into_config();
        assert_eq!(config.header_read_timeout, Duration::from_secs(10));
        assert_eq!(config.settings.request_timeout, Duration::from_secs(10));
        assert!(config.max_connections > 0);
        // A rotated certificate is served within a minute.
        assert!(config.tls_reload_interval <= Duration::from_secs(30));
        assert!(config.client_ca_file.is_none());
        let Command::Serve(args) = parse(&[
            "serve",
            "--header-read-timeout=1s",
            "--request-timeout=2s",
            "--max-connections=7",
            "--client-ca-file=ca.pem",
            "--tls-reload-interval=200ms",
        ])
        .unwrap()
        .command;
        let config = args.into_config();
        assert_eq!(config.header_read_timeout, Duration::from_secs(1));
        assert_eq!(config.settings.request_timeout, Duration::from_secs(2));
        assert_eq!(config.max_connections, 7);
        assert_eq!(config.client_ca_file, Some(PathBuf::from("ca.pem")));
        assert_eq!(config.tls_reload_interval, Duration::from_millis(200));
    }

    #[test]
    fn unknown_feature_gate_is_a_startup_error_naming_it() {
        let err = parse(&["serve", "--feature-gates=CSIVolumeHealth=true,Bogus=true"]).unwrap_err();
        assert!(
            err.to_string().contains("unrecognized feature gate: Bogus"),
            "{err}"
        );
    }

    #[test]
    fn flags_parse() {
        let Command::Serve(args) = parse(&[
            "serve",
            "--feature-gates=CSIVolumeHealth=true",
            "--authz-deny-on-mismatch",
            "--pvc-health-writers=a, b,",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
            "--shutdown-delay=1500ms",
            "--log-format=json",
        ])
        .unwrap()
        .command;
        assert_eq!(args.log_format, LogFormat::Json);
        let config = args.into_config();
        assert!(config.settings.gates.csi_volume_health);
        assert!(config.settings.authz_deny_on_mismatch);
        assert_eq!(
            config.settings.pvc_health_writers,
            Some(HashSet::from(["a".to_owned(), "b".to_owned()]))
        );
        assert_eq!(config.shutdown_delay, Duration::from_millis(1500));
        assert!(matches!(config.certs, CertSource::Files(_)));
    }

    #[test]
    fn enforcement_action_defaults_to_deny_and_reads_its_variable() {
        let Command::Serve(args) = parse(&["serve"]).unwrap().command;
        assert_eq!(
            args.into_config().settings.enforcement_action,
            EnforcementAction::Deny
        );
        for (value, action) in [
            ("deny", EnforcementAction::Deny),
            ("warn", EnforcementAction::Warn),
            ("dryrun", EnforcementAction::Dryrun),
        ] {
            let flag = format!("--enforcement-action={value}");
            let Command::Serve(args) = parse(&["serve", &flag]).unwrap().command;
            assert_eq!(args.into_config().settings.enforcement_action, action);
        }
        let err = parse(&["serve", "--enforcement-action=audit"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("[possible values: deny, warn, dryrun]"),
            "{err}"
        );
        let command = <Cli as clap::CommandFactory>::command();
        let serve = command.find_subcommand("serve").unwrap();
        let arg = serve
            .get_arguments()
            .find(|a| a.get_id() == "enforcement_action")
            .unwrap();
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some("VOLUME_HEALTH_ENFORCEMENT_ACTION")
        );
    }

    #[test]
    fn cert_without_key_is_refused() {
        assert!(parse(&["serve", "--tls-cert-file=c.pem"]).is_err());
    }
}
