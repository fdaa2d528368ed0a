//! The command line: `volume-health-webhook serve [flags]`, every flag also read from an
//! environment variable `VOLUME_HEALTH_<FLAG>`, and `check` (its flags in [`crate::check`]).

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use volume_health_validation::rules::ConditionIdentity;

use crate::enforcement::EnforcementAction;
use crate::gates::{FeatureGates, GateSettings};
use crate::handlers::Settings;
use crate::parse::{byte_quantity, go_bool};
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
// Parsed once, at start: the size of the flags of `serve` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve /mutate, /validate and /authorize over TLS, and health on a plain-HTTP port.
    Serve(ServeArgs),
    /// Check objects from files or standard input as the webhooks would, without a server.
    ///
    /// Exit code 0 when all would be admitted, 1 when some would be refused, 2 for bad usage
    /// or input that is not JSON or YAML.
    Check(crate::check::CheckArgs),
    /// Write the native policies (this project's own rules as MutatingAdmissionPolicy and
    /// ValidatingAdmissionPolicy objects) into a directory, as
    /// manifests/components/native-policies holds them.
    Policies(PoliciesArgs),
    /// Prove, against a live cluster, that the apiserver reaches each installed entry: a
    /// server-side dry-run write that only the entry can answer, and its answer.
    ///
    /// Exit code 0 when every installed entry answered, 1 when one did not (or nothing is
    /// installed), 2 for bad usage or a cluster that cannot be read, 3 when nothing failed but
    /// an entry's answer could not be seen.
    Verify(crate::verify::VerifyArgs),
    /// Check the objects a cluster holds (pods, claims, CSINodes) as the webhooks would, and
    /// write what is found as OpenReports reports: what slipped past the rules during an
    /// outage, or was stored before the install.
    Audit(crate::audit::AuditArgs),
}

/// Flags of `policies`. Environment variables are `VOLUME_HEALTH_POLICIES_<FLAG>`, apart from
/// the server's own, so that `policies` run beside `serve` does not pick up its settings.
#[derive(Debug, Args)]
pub struct PoliciesArgs {
    /// The directory the files are written into (created when missing).
    #[arg(
        long,
        env = "VOLUME_HEALTH_POLICIES_OUT_DIR",
        default_value = "manifests/components/native-policies"
    )]
    pub out_dir: PathBuf,
    /// Usernames allowed to change PVC status.healthStatus (comma-separated), as `serve`
    /// takes them, written into the writer list's policy; not given: any user but nodes.
    #[arg(long, env = "VOLUME_HEALTH_POLICIES_PVC_HEALTH_WRITERS", value_delimiter = ',', value_parser = writer)]
    pub pvc_health_writers: Vec<String>,
    /// The directory the static manifests (the validating and repair policies and their
    /// bindings, one folder each for an apiserver's `staticManifestsDir`) and their
    /// AdmissionConfiguration are written into.
    #[arg(
        long,
        env = "VOLUME_HEALTH_POLICIES_STATIC_OUT_DIR",
        default_value = "manifests/static-policies"
    )]
    pub static_out_dir: PathBuf,
    /// Where the control plane hosts hold that directory: the AdmissionConfiguration's
    /// `staticManifestsDir` is under it (an absolute path).
    #[arg(
        long,
        env = "VOLUME_HEALTH_POLICIES_STATIC_HOST_DIR",
        default_value = "/etc/kubernetes/volume-health/static-policies",
        value_parser = absolute_path
    )]
    pub static_host_dir: String,
    /// How the static bindings enforce the policies: `deny`, `warn` or `audit`.
    #[arg(long, env = "VOLUME_HEALTH_POLICIES_STATIC_ACTION", value_enum, default_value_t = StaticAction::Deny)]
    pub static_action: StaticAction,
}

/// The static bindings' `validationActions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StaticAction {
    /// Refuse the write.
    Deny,
    /// Allow it, with the denial as a warning.
    Warn,
    /// Allow it, and record the denial in the audit log.
    Audit,
}

impl From<StaticAction> for volume_health_policies::Action {
    fn from(action: StaticAction) -> Self {
        match action {
            StaticAction::Deny => Self::Deny,
            StaticAction::Warn => Self::Warn,
            StaticAction::Audit => Self::Audit,
        }
    }
}

/// An absolute path: kube-apiserver refuses a relative `staticManifestsDir`.
fn absolute_path(value: &str) -> Result<String, String> {
    if value.starts_with('/') {
        Ok(value.to_owned())
    } else {
        Err("must be an absolute path, as kube-apiserver requires of staticManifestsDir".to_owned())
    }
}

/// Flags of `serve`. As with Kubernetes components, a flag given again overrides the earlier
/// value (kustomize patches and `make run ARGS=...` append flags), except `--feature-gates`,
/// whose values merge gate by gate.
#[derive(Debug, Args)]
#[command(args_override_self = true)]
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
    /// Given several times, the values merge left to right (a later value for a gate wins).
    #[arg(
        long,
        env = "VOLUME_HEALTH_FEATURE_GATES",
        default_value = "CSIVolumeHealth=false",
        action = ArgAction::Append
    )]
    pub feature_gates: Vec<GateSettings>,
    /// Explicitly deny a node's request for another node's CSINode, so that no later
    /// authorizer can grant it (otherwise: no opinion). Takes what Go's `strconv.ParseBool`
    /// takes (`--authz-deny-on-mismatch=false`, `VOLUME_HEALTH_AUTHZ_DENY_ON_MISMATCH=1`).
    #[arg(
        long,
        env = "VOLUME_HEALTH_AUTHZ_DENY_ON_MISMATCH",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = go_bool
    )]
    pub authz_deny_on_mismatch: bool,
    /// Refuse two storage health conditions of one driver with the same status, reason,
    /// accessMode and volumeMode (this project's own rule; in-tree Kubernetes accepts them).
    /// `--storage-health-unique-conditions=false` answers exactly as in-tree. Takes what Go's
    /// `strconv.ParseBool` takes.
    #[arg(
        long,
        env = "VOLUME_HEALTH_STORAGE_HEALTH_UNIQUE_CONDITIONS",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = go_bool
    )]
    pub storage_health_unique_conditions: bool,
    /// Usernames allowed to change PVC status.healthStatus (comma-separated); not given: any
    /// user but nodes. A blank entry is refused: a list that names nobody would refuse every
    /// writer, and one with a stray comma would silently mean another list. So is an entry with
    /// a character that is not printable, as the chart refuses it.
    #[arg(long, env = "VOLUME_HEALTH_PVC_HEALTH_WRITERS", value_delimiter = ',', value_parser = writer)]
    pub pvc_health_writers: Vec<String>,
    /// On `/mutate`, rewrite a status write that in-tree validation or this project's storage
    /// condition rule would refuse, and that its writer would retry for ever, into the nearest
    /// write they accept (later duplicates dropped, entries given twice merged, the 16 most
    /// severe conditions kept, impossible reasons and modes replaced, messages cut to 1024
    /// bytes), with a warning, an audit annotation and a metric for each kind of repair. Off by
    /// default. Takes what Go's `strconv.ParseBool` takes.
    #[arg(
        long,
        env = "VOLUME_HEALTH_REPAIR",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = go_bool
    )]
    pub repair: bool,
    /// What /validate does with a review that field validation refuses: `deny` it, allow it
    /// with the errors as warnings (`warn`), or allow it and only log and count it (`dryrun`).
    /// Node restriction always denies.
    #[arg(long, env = "VOLUME_HEALTH_ENFORCEMENT_ACTION", value_enum, default_value_t = EnforcementAction::Deny)]
    pub enforcement_action: EnforcementAction,
    /// Largest request body, in bytes or as a Kubernetes quantity (`7Mi`, `8M`); an UPDATE
    /// review carries two objects.
    #[arg(
        long,
        env = "VOLUME_HEALTH_MAX_REQUEST_BYTES",
        default_value = "7Mi",
        value_parser = byte_quantity
    )]
    pub max_request_bytes: usize,
    /// Most bytes of request bodies held at once (each body from its first byte to its answer);
    /// a request that would go over waits, its bytes left in its socket. With the memory a
    /// review takes to decide (at most about as much again as its size), this bounds the
    /// server's memory: see docs/configuration.md.
    #[arg(long, env = "VOLUME_HEALTH_MAX_IN_FLIGHT_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_in_flight_bytes: usize,
    /// Log line format.
    #[arg(long, env = "VOLUME_HEALTH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Time allowed for the TLS handshake and for each request's headers, from their first
    /// byte.
    #[arg(long, env = "VOLUME_HEALTH_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// A keep-alive connection (HTTP/1.1 or h2) that sends no new request for this long after
    /// its last answer is closed. Longer than the apiserver's own idle timeout (90 s), so that
    /// the client closes an idle connection, never the server under a request being written.
    #[arg(long, env = "VOLUME_HEALTH_IDLE_TIMEOUT", default_value = "120s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// Time allowed to receive a request's body (the answer follows without waiting).
    #[arg(long, env = "VOLUME_HEALTH_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Most connections served at once on each port. With all taken, the oldest that has not yet sent a whole request head
    /// (in its handshake, or sending its first head) is closed for a new one; with none such,
    /// new ones wait in the listen backlog. A connection that has sent a request is never
    /// closed to make room: its client may be writing the next one on it.
    #[arg(long, env = "VOLUME_HEALTH_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Most connections from one client address on each port; 0 (the default): no such limit.
    /// Beyond it, that client's oldest connection that has not yet sent a whole request head is
    /// closed for the new one, or, with none such, the new one is. The apiserver calls over
    /// HTTP/1.1, a connection per call in flight, all from its own address: a limit below its
    /// in-flight requests (600 by default) refuses its calls.
    #[arg(
        long,
        env = "VOLUME_HEALTH_MAX_CONNECTIONS_PER_PEER",
        default_value_t = 0
    )]
    pub max_connections_per_peer: usize,

    /// After SIGTERM, keep accepting this long (readiness already failing, clients asked to
    /// reconnect): at least the readiness probe's period × failure threshold plus propagation.
    #[arg(long, env = "VOLUME_HEALTH_SHUTDOWN_DELAY", default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,
    /// Then wait at most this long for the open connections to end (requests in flight
    /// answered, unused keep-alive connections at their idle timeout).
    #[arg(long, env = "VOLUME_HEALTH_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,
    /// How often the certificate files are checked for changes.
    #[arg(long, env = "VOLUME_HEALTH_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub tls_reload_interval: Duration,
    /// The name clients reach the server by (the Service's DNS name,
    /// `<service>.<namespace>.svc`). A reloaded certificate that does not name it is not served
    /// (nor one expired, not yet valid, or not for serving, checked with or without it).
    #[arg(long, env = "VOLUME_HEALTH_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

impl ServeArgs {
    /// The server configuration these flags describe.
    pub fn into_config(self) -> ServeConfig {
        let writers: HashSet<String> = self.pvc_health_writers.into_iter().collect();
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
            tls_server_name: self.tls_server_name,
            settings: Settings {
                gates: FeatureGates::from_flags(self.feature_gates),
                authz_deny_on_mismatch: self.authz_deny_on_mismatch,
                storage_condition_identity: ConditionIdentity::unique_if(
                    self.storage_health_unique_conditions,
                ),
                pvc_health_writers: (!writers.is_empty()).then_some(writers),
                enforcement_action: self.enforcement_action,
                repair: self.repair,
                max_request_bytes: self.max_request_bytes,
                max_in_flight_bytes: self.max_in_flight_bytes,
                request_timeout: self.request_timeout,
            },
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            shutdown_delay: self.shutdown_delay,
            shutdown_timeout: self.shutdown_timeout,
        }
    }
}

/// One user of `--pvc-health-writers`, trimmed; a blank one is refused.
/// An entry of `--pvc-health-writers`, refused as the chart refuses it.
fn writer(s: &str) -> Result<String, String> {
    volume_health_validation::restriction::writer_name(s)
        .map(str::to_owned)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("volume-health-webhook").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_match_the_spec() {
        let Command::Serve(args) = parse(&["serve"]).unwrap().command else {
            unreachable!("serve")
        };
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
        let Command::Serve(args) = parse(&["serve"]).unwrap().command else {
            unreachable!("serve")
        };
        let config = args.into_config();
        assert_eq!(config.header_read_timeout, Duration::from_secs(10));
        // Longer than Go's 90 s idle connections, separate from the header timeout.
        assert_eq!(config.idle_timeout, Duration::from_secs(120));
        assert_eq!(config.max_connections_per_peer, 0);
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
            "--max-connections-per-peer=3",
            "--idle-timeout=95s",
            "--client-ca-file=ca.pem",
            "--tls-reload-interval=200ms",
        ])
        .unwrap()
        .command
        else {
            unreachable!("serve")
        };
        let config = args.into_config();
        assert_eq!(config.header_read_timeout, Duration::from_secs(1));
        assert_eq!(config.settings.request_timeout, Duration::from_secs(2));
        assert_eq!(config.max_connections, 7);
        assert_eq!(config.max_connections_per_peer, 3);
        assert_eq!(config.idle_timeout, Duration::from_secs(95));
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
            "--pvc-health-writers=a, b",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
            "--shutdown-delay=1500ms",
            "--log-format=json",
        ])
        .unwrap()
        .command
        else {
            unreachable!("serve")
        };
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
    fn a_writer_list_must_name_someone() {
        for blank in ["", " ", "a,,b", "a, ", ","] {
            let flag = format!("--pvc-health-writers={blank}");
            let err = parse(&["serve", flag.as_str()]).unwrap_err();
            assert!(err.to_string().contains("names nobody"), "{blank:?}: {err}");
        }
        let c = config(&["--pvc-health-writers= a , b"]);
        assert_eq!(
            c.settings.pvc_health_writers,
            Some(HashSet::from(["a", "b"].map(str::to_owned)))
        );
    }

    #[test]
    fn repair_is_off_unless_asked_for() {
        assert!(!config(&[]).settings.repair);
        assert!(config(&["--repair"]).settings.repair);
        assert!(config(&["--repair=true"]).settings.repair);
        assert!(!config(&["--repair=false"]).settings.repair);
    }

    fn config(args: &[&str]) -> ServeConfig {
        let Command::Serve(args) = parse(&[&["serve"], args].concat()).unwrap().command else {
            panic!("not serve");
        };
        args.into_config()
    }

    #[test]
    fn a_later_flag_overrides_an_earlier_one() {
        let c = config(&["--bind-address", "0.0.0.0", "--bind-address=127.0.0.1"]);
        assert_eq!(c.bind_address, IpAddr::from([127, 0, 0, 1]));
        let c = config(&["--secure-port=1", "--health-port=2", "--secure-port=3"]);
        assert_eq!((c.secure_port, c.health_port), (3, 2));
        let c = config(&["--max-request-bytes=1Mi", "--max-request-bytes=2Mi"]);
        assert_eq!(c.settings.max_request_bytes, 2 << 20);
        let c = config(&["--shutdown-delay=1s", "--shutdown-delay=2s"]);
        assert_eq!(c.shutdown_delay, Duration::from_secs(2));
        let c = config(&["--authz-deny-on-mismatch", "--authz-deny-on-mismatch=false"]);
        assert!(!c.settings.authz_deny_on_mismatch);
        // A list flag given again adds to the list, as pflag's string slices do.
        let c = config(&["--pvc-health-writers=a,b", "--pvc-health-writers=c"]);
        assert_eq!(
            c.settings.pvc_health_writers,
            Some(HashSet::from(["a", "b", "c"].map(str::to_owned)))
        );
        let Command::Serve(args) = parse(&["serve", "--log-format=json", "--log-format=text"])
            .unwrap()
            .command
        else {
            panic!("not serve");
        };
        assert_eq!(args.log_format, LogFormat::Text);
    }

    #[test]
    fn feature_gates_given_twice_merge() {
        // (flags, CSIVolumeHealth)
        let table: &[(&[&str], bool)] = &[
            (&[], false),
            (&["--feature-gates=CSIVolumeHealth=true"], true),
            (
                &[
                    "--feature-gates=CSIVolumeHealth=true",
                    "--feature-gates",
                    "CSIVolumeHealth=false",
                ],
                false,
            ),
            (
                &[
                    "--feature-gates=CSIVolumeHealth=false",
                    "--feature-gates=CSIVolumeHealth=true",
                ],
                true,
            ),
            (
                &[
                    "--feature-gates=CSIVolumeHealth=true",
                    "--feature-gates=AllBeta=false",
                ],
                true,
            ),
            (
                &[
                    "--feature-gates=CSIVolumeHealth=false",
                    "--feature-gates=AllAlpha=true",
                ],
                false,
            ),
        ];
        for (flags, want) in table {
            assert_eq!(
                config(flags).settings.gates.csi_volume_health,
                *want,
                "{flags:?}"
            );
        }
        let err = parse(&[
            "serve",
            "--feature-gates=CSIVolumeHealth=true",
            "--feature-gates=Bogus=true",
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains("unrecognized feature gate: Bogus"),
            "{err}"
        );
    }

    #[test]
    fn storage_condition_identity_is_on_unless_turned_off() {
        let identity = |flags: &[&str]| config(flags).settings.storage_condition_identity;
        assert_eq!(identity(&[]), ConditionIdentity::Unique);
        assert_eq!(
            identity(&["--storage-health-unique-conditions"]),
            ConditionIdentity::Unique
        );
        for off in ["false", "0", "F"] {
            let flag = format!("--storage-health-unique-conditions={off}");
            assert_eq!(identity(&[&flag]), ConditionIdentity::InTree, "{flag}");
        }
        assert!(parse(&["serve", "--storage-health-unique-conditions=no"]).is_err());
    }

    #[test]
    fn boolean_flags_take_what_go_parse_bool_takes() {
        for (flag, want) in [
            ("--authz-deny-on-mismatch", true),
            ("--authz-deny-on-mismatch=1", true),
            ("--authz-deny-on-mismatch=t", true),
            ("--authz-deny-on-mismatch=T", true),
            ("--authz-deny-on-mismatch=TRUE", true),
            ("--authz-deny-on-mismatch=true", true),
            ("--authz-deny-on-mismatch=True", true),
            ("--authz-deny-on-mismatch=0", false),
            ("--authz-deny-on-mismatch=f", false),
            ("--authz-deny-on-mismatch=F", false),
            ("--authz-deny-on-mismatch=FALSE", false),
            ("--authz-deny-on-mismatch=false", false),
            ("--authz-deny-on-mismatch=False", false),
        ] {
            assert_eq!(
                config(&[flag]).settings.authz_deny_on_mismatch,
                want,
                "{flag}"
            );
        }
        for bad in ["yes", "on", "tRUE", "2", ""] {
            let flag = format!("--authz-deny-on-mismatch={bad}");
            let err = parse(&["serve", &flag]).unwrap_err().to_string();
            assert!(
                err.contains("--authz-deny-on-mismatch") && err.contains("strconv.ParseBool"),
                "{flag}: {err}"
            );
        }
        // Like pflag, a boolean flag's value must be attached with `=`: a following word is
        // not taken as its value.
        assert!(parse(&["serve", "--authz-deny-on-mismatch", "false"]).is_err());
    }

    #[test]
    fn request_size_flag_takes_kubernetes_quantities() {
        assert_eq!(
            config(&["--max-request-bytes=3Mi"])
                .settings
                .max_request_bytes,
            3 << 20
        );
    }

    #[test]
    fn enforcement_action_defaults_to_deny_and_reads_its_variable() {
        let Command::Serve(args) = parse(&["serve"]).unwrap().command else {
            panic!("not serve");
        };
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
            let Command::Serve(args) = parse(&["serve", &flag]).unwrap().command else {
                panic!("not serve");
            };
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
