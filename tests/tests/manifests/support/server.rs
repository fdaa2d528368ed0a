//! The command line of `volume-health-webhook serve`, as a container spec sets it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// The binary every container runs.
pub(crate) const BINARY: &str = "volume-health-webhook";

/// The server's flags and their defaults. Every flag can also be set through the
/// environment variable `VOLUME_HEALTH_<FLAG_IN_UPPER_SNAKE>`; a flag wins over its
/// variable.
const FLAGS: &[(&str, Option<&str>)] = &[
    ("bind-address", Some("0.0.0.0")),
    ("secure-port", Some("8443")),
    ("health-port", Some("8080")),
    ("tls-cert-file", None),
    ("tls-private-key-file", None),
    ("client-ca-file", None),
    ("self-signed-ca-file", None),
    ("feature-gates", Some("")),
    ("authz-deny-on-mismatch", Some("false")),
    ("pvc-health-writers", Some("")),
    ("enforcement-action", Some("deny")),
    ("max-request-bytes", Some("7340032")),
    ("log-format", Some("text")),
    ("header-read-timeout", Some("10s")),
    ("request-timeout", Some("10s")),
    ("shutdown-delay", Some("5s")),
    ("shutdown-timeout", Some("20s")),
    ("tls-server-name", None),
    ("repair", Some("false")),
];

const BOOLEAN_FLAGS: &[&str] = &["authz-deny-on-mismatch", "repair"];

/// Route of the mutating webhook.
pub(crate) const MUTATE_PATH: &str = "/mutate";
/// Route of the validating webhook.
pub(crate) const VALIDATE_PATH: &str = "/validate";
/// Route of the authorization webhook.
pub(crate) const AUTHORIZE_PATH: &str = "/authorize";
/// Liveness route on the health port.
pub(crate) const LIVENESS_PATH: &str = "/healthz";
/// Readiness route on the health port.
pub(crate) const READINESS_PATH: &str = "/readyz";

/// From an endpoint's removal to the last load balancer that stops sending it new
/// connections: the EndpointSlice controller, kube-proxy's next sync, the apiserver's own
/// endpoint resolution.
pub(crate) const PROPAGATION: Duration = Duration::from_secs(5);

/// The effective configuration of one container running the server.
pub(crate) struct ServerFlags {
    values: BTreeMap<&'static str, Option<String>>,
    /// Whether a value came from a flag or variable rather than the default.
    explicit: BTreeMap<&'static str, bool>,
}

impl ServerFlags {
    /// Reads `command`, `args` and `env` of a container; panics on anything the server
    /// would refuse (an unknown flag, a missing `serve`) or that the test cannot judge
    /// (`valueFrom`).
    pub(crate) fn of(container: &Value) -> Self {
        let name = container["name"].as_str().unwrap_or("?");
        let mut argv: Vec<String> = Vec::new();
        for part in ["command", "args"] {
            for arg in super::array_at(container, &format!("/{part}")) {
                argv.push(
                    arg.as_str()
                        .unwrap_or_else(|| panic!("{name}: {part} must be strings"))
                        .to_owned(),
                );
            }
        }
        let binary = argv.first().map(String::as_str);
        assert!(
            binary.is_some_and(|b| b == BINARY || b.ends_with(&format!("/{BINARY}"))),
            "container {name} must run {BINARY}, runs {argv:?}"
        );
        assert_eq!(
            argv.get(1).map(String::as_str),
            Some("serve"),
            "container {name}: `{BINARY} serve` expected"
        );

        let mut values: BTreeMap<&'static str, Option<String>> = FLAGS
            .iter()
            .map(|(flag, default)| (*flag, default.map(str::to_owned)))
            .collect();
        let mut explicit: BTreeMap<&'static str, bool> =
            FLAGS.iter().map(|(flag, _)| (*flag, false)).collect();

        for var in super::array_at(container, "/env") {
            let var_name = super::str_at(var, "/name");
            let Some(suffix) = var_name.strip_prefix("VOLUME_HEALTH_") else {
                continue;
            };
            let flag =
                known_flag(&suffix.to_ascii_lowercase().replace('_', "-")).unwrap_or_else(|| {
                    panic!("container {name}: {var_name} names no flag of the server")
                });
            let value = var["value"].as_str().unwrap_or_else(|| {
                panic!("container {name}: {var_name} must have a literal value")
            });
            values.insert(flag, Some(value.to_owned()));
            explicit.insert(flag, true);
        }

        let mut rest = argv[2..].iter();
        while let Some(arg) = rest.next() {
            let body = arg
                .strip_prefix("--")
                .unwrap_or_else(|| panic!("container {name}: unexpected argument {arg:?}"));
            let (flag, value) = match body.split_once('=') {
                Some((flag, value)) => (flag, value.to_owned()),
                None if BOOLEAN_FLAGS.contains(&body) => (body, "true".to_owned()),
                None => (
                    body,
                    rest.next()
                        .unwrap_or_else(|| panic!("container {name}: --{body} needs a value"))
                        .clone(),
                ),
            };
            let flag = known_flag(flag)
                .unwrap_or_else(|| panic!("container {name}: unknown flag --{flag}"));
            values.insert(flag, Some(value));
            explicit.insert(flag, true);
        }
        Self { values, explicit }
    }

    /// The value of a flag, if it has one.
    pub(crate) fn get(&self, flag: &str) -> Option<&str> {
        let flag =
            known_flag(flag).unwrap_or_else(|| panic!("the test asked for an unknown flag {flag}"));
        self.values[flag].as_deref()
    }

    /// Whether the container sets a flag (by argument or variable) instead of relying on
    /// the default.
    pub(crate) fn is_set(&self, flag: &str) -> bool {
        let flag =
            known_flag(flag).unwrap_or_else(|| panic!("the test asked for an unknown flag {flag}"));
        self.explicit[flag]
    }

    /// A port flag.
    pub(crate) fn port(&self, flag: &str) -> u16 {
        let value = self
            .get(flag)
            .unwrap_or_else(|| panic!("--{flag} has no value"));
        value
            .parse()
            .unwrap_or_else(|_| panic!("--{flag}={value} is not a port"))
    }

    /// A duration flag, in Go's notation (`5s`, `500ms`, `1m`).
    pub(crate) fn duration(&self, flag: &str) -> Duration {
        let value = self
            .get(flag)
            .unwrap_or_else(|| panic!("--{flag} has no value"));
        parse_duration(value)
    }
}

fn known_flag(flag: &str) -> Option<&'static str> {
    FLAGS
        .iter()
        .map(|(known, _)| *known)
        .find(|known| *known == flag)
}

/// Parses a Go duration with one unit (`3s`, `500ms`, `1m`, `1h`).
pub(crate) fn parse_duration(text: &str) -> Duration {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or_else(|| panic!("duration {text:?} has no unit"));
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("duration {text:?} has no number"));
    match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        "h" => Duration::from_secs(number * 3600),
        _ => panic!("duration {text:?} has an unknown unit"),
    }
}
