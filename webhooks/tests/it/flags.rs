//! The binary's command line as an operator meets it: environment variables, repeated flags
//! and start-up refusals, each checked on the process's exit code and message.
//!
//! Every case stops before anything is served: either parsing fails (clap exits 2), or the
//! server refuses to start because `--secure-port` equals `--health-port` (exit 1), which
//! proves that the flags and variables before it parsed.

use std::process::{Command, Output};

const SAME_PORT: &str = "--secure-port and --health-port are both 18080";

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_volume-health-webhook"));
    command
        .arg("serve")
        .arg("--bind-address=127.0.0.1")
        .args(args)
        .env_clear()
        .envs(env.iter().copied());
    command.output().expect("the binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Parsing passed: the only complaint is the equal ports.
fn assert_parsed(output: &Output, case: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{case}: {err}");
    assert!(err.contains(SAME_PORT), "{case}: {err}");
}

#[test]
fn equal_ports_are_refused_with_a_clear_message() {
    let output = run(&["--secure-port=18080", "--health-port=18080"], &[]);
    assert_parsed(&output, "equal ports");
    assert!(
        !stderr(&output).contains("Address in use"),
        "refused before binding: {}",
        stderr(&output)
    );
    // The same through the environment, and through a later flag overriding an earlier one.
    assert_parsed(
        &run(
            &[],
            &[
                ("VOLUME_HEALTH_SECURE_PORT", "18080"),
                ("VOLUME_HEALTH_HEALTH_PORT", "18080"),
            ],
        ),
        "equal ports from the environment",
    );
    assert_parsed(
        &run(
            &[
                "--secure-port=8443",
                "--health-port=18080",
                "--secure-port=18080",
            ],
            &[],
        ),
        "a later flag",
    );
}

#[test]
fn boolean_environment_variables_take_what_go_parse_bool_takes() {
    let ports = ["--secure-port=18080", "--health-port=18080"];
    for value in [
        "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False",
    ] {
        let output = run(&ports, &[("VOLUME_HEALTH_AUTHZ_DENY_ON_MISMATCH", value)]);
        assert_parsed(&output, value);
    }
    for value in ["yes", "on", "2", "tRUE"] {
        let output = run(&ports, &[("VOLUME_HEALTH_AUTHZ_DENY_ON_MISMATCH", value)]);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{value}: {err}");
        assert!(
            err.contains("--authz-deny-on-mismatch")
                && err.contains(&format!(
                    "strconv.ParseBool: parsing {value:?}: invalid syntax"
                )),
            "{value}: {err}"
        );
    }
}

#[test]
fn feature_gates_flags_and_quantities_from_the_command_line() {
    let ports = ["--secure-port=18080", "--health-port=18080"];
    let repeated = [
        &ports[..],
        &[
            "--feature-gates=CSIVolumeHealth=true",
            "--feature-gates",
            "CSIVolumeHealth=false",
            "--max-request-bytes=7Mi",
        ],
    ]
    .concat();
    assert_parsed(&run(&repeated, &[]), "repeated --feature-gates");
    assert_parsed(
        &run(&ports, &[("VOLUME_HEALTH_MAX_REQUEST_BYTES", "3Mi")]),
        "a quantity from the environment",
    );
    let output = run(&[&ports[..], &["--max-request-bytes=7MB"]].concat(), &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("7Mi"), "{}", stderr(&output));
}
