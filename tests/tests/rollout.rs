//! Rolling restarts and a crash under load, behind a real load balancer: three replicas of the
//! release binary, with the Deployment's flags and environment, behind haproxy in TCP mode (TLS
//! passthrough, health checks on `/readyz` of the health port with the readiness probe's period,
//! timeout and failure threshold, no retry and no redispatch of a connection, as kube-proxy), and
//! a load client built like kube-apiserver's webhook client (Go `net/http`; a POST is never
//! retried once written, a refused connection is a failure; 3 s timeout).
//!
//! Each replica is restarted in turn (SIGTERM, exit, a new process on the same ports, ready,
//! next) under mixed pod, PVC, CSINode and SubjectAccessReview traffic, for HTTP/2 and HTTP/1.1
//! clients, with the endpoint leaving the load balancer at once (pod deletion: the server is
//! put in maintenance at SIGTERM) and only after its health checks fail. Every review must be
//! answered, and answered as before the restarts. Then one replica is killed (SIGKILL; its
//! endpoint leaves at once, as when the kubelet reports the container dead) and a replacement
//! started: it must be ready within the readiness probe's period, and only reviews that were in
//! flight when the endpoint left may be lost.
//!
//! Slow (some 4 minutes), so ignored: `make rollout` builds the release binary and the load
//! client, installs haproxy when it is missing, and runs it with `--ignored`. Everything listens
//! on 127.0.0.1, every wait is bounded, every process is stopped by its PID, and the logs are
//! kept (and their ends printed) when it fails.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_json::{Value, json};

const REPLICAS: usize = 3;
/// Load before and after the restarts, so that every connection is in use when they start.
const SETTLE: Duration = Duration::from_secs(2);
/// The whole test, whatever happens.
const DEADLINE: Duration = Duration::from_secs(540);
/// A failed review counts as in flight at the crash if the client had it before the endpoint
/// left plus this much: the time a client on a loaded machine may take to see that its
/// connection was reset, during which it still writes reviews on it.
const CRASH_SLACK: Duration = Duration::from_millis(200);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
        .to_owned()
}

/// A started process, killed by its PID when dropped.
struct Process {
    name: String,
    child: Child,
}

impl Process {
    fn start(name: String, dir: &Path, command: &mut Command) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log)?;
        let child = command
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        Ok(Process { name, child })
    }

    fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()?;
        ensure!(status.success(), "kill -{signal} {} failed", self.name);
        Ok(())
    }

    fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Waits at most `limit` for the process to exit, calling `meanwhile` between polls.
    fn wait_exit(
        &mut self,
        limit: Duration,
        mut meanwhile: impl FnMut() -> Result<()>,
    ) -> Result<std::process::ExitStatus> {
        let give_up = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited()? {
                return Ok(status);
            }
            ensure!(
                Instant::now() < give_up,
                "{} still running after {limit:?}",
                self.name
            );
            meanwhile()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // `Child::kill` signals this child's PID only.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

fn unix_ns(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What the Deployment runs: its flags and environment, readiness probe and grace period.
struct Deployment {
    args: Vec<String>,
    env: Vec<(String, String)>,
    probe_period: Duration,
    probe_timeout: Duration,
    failure_threshold: u64,
    grace: Duration,
}

impl Deployment {
    fn read() -> Result<Self> {
        let path = workspace().join("manifests/base/deployment.yaml");
        let text = std::fs::read_to_string(&path)?;
        let deployment: Value = serde_yaml::from_str(&text)?;
        let pod = &deployment["spec"]["template"]["spec"];
        let container = pod["containers"]
            .as_array()
            .and_then(|containers| containers.iter().find(|c| c["name"] == "webhook"))
            .ok_or_else(|| anyhow!("{}: no webhook container", path.display()))?;
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        // The addresses, ports and certificate files are this test's own.
        let own = [
            "--bind-address",
            "--secure-port",
            "--health-port",
            "--tls-cert-file",
            "--tls-private-key-file",
        ];
        let args: Vec<String> = strings(&container["args"])
            .into_iter()
            .filter(|arg| !own.iter().any(|flag| arg.starts_with(flag)))
            .collect();
        ensure!(args.first().map(String::as_str) == Some("serve"));
        let env = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|var| {
                Ok((
                    var["name"].as_str().context("env name")?.to_owned(),
                    var["value"].as_str().context("env value")?.to_owned(),
                ))
            })
            .collect::<Result<_>>()?;
        let probe = &container["readinessProbe"];
        let seconds =
            |value: &Value, default: u64| Duration::from_secs(value.as_u64().unwrap_or(default));
        Ok(Deployment {
            args,
            env,
            probe_period: seconds(&probe["periodSeconds"], 10),
            probe_timeout: seconds(&probe["timeoutSeconds"], 1),
            failure_threshold: probe["failureThreshold"].as_u64().unwrap_or(3),
            grace: seconds(&pod["terminationGracePeriodSeconds"], 30),
        })
    }
}

/// Where the endpoint leaves the load balancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leaves {
    /// At SIGTERM, as on pod deletion.
    AtOnce,
    /// When the health checks have failed.
    AfterProbes,
}

impl Leaves {
    fn describe(self) -> &'static str {
        match self {
            Leaves::AtOnce => "endpoint leaves at SIGTERM",
            Leaves::AfterProbes => "endpoint leaves after failed probes",
        }
    }
}

/// One replica: its ports and its current process.
struct Replica {
    index: usize,
    secure: u16,
    health: u16,
    generation: usize,
    process: Option<Process>,
}

/// The replicas, haproxy in front of them, and the files they share.
struct Fleet {
    dir: PathBuf,
    deployment: Deployment,
    binary: PathBuf,
    replicas: Vec<Replica>,
    haproxy: Option<Process>,
    frontend: SocketAddr,
    deadline: Instant,
}

impl Fleet {
    fn start(dir: &Path, binary: PathBuf, deployment: Deployment) -> Result<Self> {
        write_certificates(dir)?;
        let replicas = (0..REPLICAS)
            .map(|index| {
                Ok(Replica {
                    index,
                    secure: free_port()?,
                    health: free_port()?,
                    generation: 0,
                    process: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut fleet = Fleet {
            dir: dir.to_owned(),
            deployment,
            binary,
            replicas,
            haproxy: None,
            frontend: SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?)),
            deadline: Instant::now() + DEADLINE,
        };
        for index in 0..REPLICAS {
            fleet.start_replica(index)?;
            fleet.wait_ready(index, Duration::from_secs(10))?;
        }
        fleet.start_haproxy()?;
        for index in 0..REPLICAS {
            fleet.wait_up(index, Duration::from_secs(15))?;
        }
        Ok(fleet)
    }

    fn check_deadline(&self) -> Result<()> {
        ensure!(
            Instant::now() < self.deadline,
            "the test ran past its {DEADLINE:?}"
        );
        Ok(())
    }

    fn start_replica(&mut self, index: usize) -> Result<()> {
        let dir = self.dir.clone();
        let replica = &mut self.replicas[index];
        replica.generation += 1;
        let mut command = Command::new(&self.binary);
        command
            .args(&self.deployment.args)
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", replica.secure))
            .arg(format!("--health-port={}", replica.health))
            .arg(format!("--tls-cert-file={}", dir.join("tls.crt").display()))
            .arg(format!(
                "--tls-private-key-file={}",
                dir.join("tls.key").display()
            ))
            // Reached on loopback by the name its certificate carries, not the Service's.
            .arg("--tls-server-name=localhost")
            .env_clear()
            .envs(self.deployment.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        replica.process = Some(Process::start(
            format!("replica-{index}.{}", replica.generation),
            &dir,
            &mut command,
        )?);
        Ok(())
    }

    /// Waits until the replica's `/readyz` passes; how long that took.
    fn wait_ready(&mut self, index: usize, limit: Duration) -> Result<Duration> {
        let started = Instant::now();
        let health = SocketAddr::from((Ipv4Addr::LOCALHOST, self.replicas[index].health));
        loop {
            let process = self.replicas[index].process.as_mut().context("started")?;
            if let Some(status) = process.exited()? {
                bail!("replica {index} exited: {status}");
            }
            if readyz(health) == Some(200) {
                return Ok(started.elapsed());
            }
            ensure!(
                started.elapsed() < limit,
                "replica {index} not ready within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn start_haproxy(&mut self) -> Result<()> {
        let d = &self.deployment;
        let mut config = format!(
            "global\n\
             \x20 stats socket {socket} mode 600 level admin\n\
             \x20 maxconn 8192\n\
             defaults\n\
             \x20 mode tcp\n\
             \x20 timeout connect 1s\n\
             \x20 timeout client 120s\n\
             \x20 timeout server 120s\n\
             \x20 timeout check {timeout}ms\n\
             \x20 # As kube-proxy: a connection that the replica refuses is not retried elsewhere.\n\
             \x20 retries 0\n\
             \x20 no option redispatch\n\
             frontend webhooks\n\
             \x20 bind {frontend}\n\
             \x20 default_backend replicas\n\
             backend replicas\n\
             \x20 balance roundrobin\n\
             \x20 option httpchk\n\
             \x20 http-check send meth GET uri /readyz\n\
             \x20 http-check expect status 200\n\
             \x20 # The readiness probe: its period and failure threshold. A replica that is down\n\
             \x20 # is probed every 500 ms, as the kubelet probes a container that just started.\n\
             \x20 default-server check inter {inter}ms downinter 500ms fall {fall} rise 1\n",
            socket = self.socket().display(),
            timeout = d.probe_timeout.as_millis(),
            frontend = self.frontend,
            inter = d.probe_period.as_millis(),
            fall = d.failure_threshold,
        );
        for replica in &self.replicas {
            config.push_str(&format!(
                "  server r{} 127.0.0.1:{} port {}\n",
                replica.index, replica.secure, replica.health
            ));
        }
        let path = self.dir.join("haproxy.cfg");
        std::fs::write(&path, config)?;
        self.haproxy = Some(Process::start(
            "haproxy".to_owned(),
            &self.dir,
            Command::new("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&path)
                .stdin(Stdio::null()),
        )?);
        let give_up = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(self.socket()).is_err() {
            if let Some(status) = self
                .haproxy
                .as_mut()
                .map(Process::exited)
                .transpose()?
                .flatten()
            {
                bail!("haproxy exited: {status}");
            }
            ensure!(Instant::now() < give_up, "haproxy's socket never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("haproxy.sock")
    }

    /// One command on haproxy's runtime API; its answer.
    fn haproxy(&self, command: &str) -> Result<String> {
        let mut socket = UnixStream::connect(self.socket())?;
        socket.set_read_timeout(Some(Duration::from_secs(2)))?;
        socket.write_all(format!("{command}\n").as_bytes())?;
        let mut answer = String::new();
        socket.read_to_string(&mut answer)?;
        Ok(answer)
    }

    /// Whether haproxy routes new connections to the replica.
    fn is_up(&self, index: usize) -> Result<bool> {
        let state = self.haproxy("show servers state replicas")?;
        let name = format!("r{index}");
        let line = state
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|fields| fields.get(3) == Some(&name.as_str()))
            .ok_or_else(|| anyhow!("haproxy does not list {name}: {state}"))?;
        // srv_op_state 2 is running; srv_admin_state 0 is not in maintenance.
        Ok(line.get(5) == Some(&"2") && line.get(6) == Some(&"0"))
    }

    fn wait_up(&self, index: usize, limit: Duration) -> Result<Duration> {
        let started = Instant::now();
        while !self.is_up(index)? {
            ensure!(
                started.elapsed() < limit,
                "haproxy did not route to replica {index} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(started.elapsed())
    }

    fn set_state(&self, index: usize, state: &str) -> Result<()> {
        let answer = self.haproxy(&format!("set server replicas/r{index} state {state}"))?;
        ensure!(answer.trim().is_empty(), "haproxy: {answer}");
        Ok(())
    }

    /// A graceful restart of one replica, as a rolling update does it.
    fn restart(&mut self, index: usize, leaves: Leaves) -> Result<Restart> {
        let grace = self.deployment.grace;
        let signalled = Instant::now();
        let process = self.replicas[index].process.take().context("running")?;
        process.signal("TERM")?;
        if leaves == Leaves::AtOnce {
            self.set_state(index, "maint")?;
        }
        let mut process = process;
        let mut left = None;
        let status = process.wait_exit(grace, || {
            self.check_deadline()?;
            if left.is_none() && !self.is_up(index)? {
                left = Some(signalled.elapsed());
            }
            Ok(())
        })?;
        let exited = signalled.elapsed();
        ensure!(status.success(), "replica {index} exited with {status}");
        let left = left.ok_or_else(|| {
            anyhow!("replica {index} exited after {exited:?}, before the load balancer dropped it")
        })?;
        drop(process);
        self.start_replica(index)?;
        let ready = self.wait_ready(index, self.deployment.probe_period)?;
        if leaves == Leaves::AtOnce {
            self.set_state(index, "ready")?;
        }
        self.wait_up(index, self.deployment.probe_period * 2)?;
        Ok(Restart {
            left,
            exited,
            ready,
        })
    }
}

struct Restart {
    left: Duration,
    exited: Duration,
    ready: Duration,
}

/// `/readyz` on a health port: the status code, if it answered.
fn readyz(addr: SocketAddr) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// A CA and a serving certificate for localhost and 127.0.0.1, shared by the replicas as one
/// Secret is.
fn write_certificates(dir: &Path) -> Result<()> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "rollout CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "volume-health-webhook");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    std::fs::write(dir.join("ca.crt"), ca.pem())?;
    std::fs::write(dir.join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;
    Ok(())
}

/// The mixed traffic: the examples' reviews of pods, claims and CSINodes to both admission
/// webhooks, and their SubjectAccessReviews to the authorizer.
fn write_spec(dir: &Path) -> Result<PathBuf> {
    let examples = workspace().join("examples");
    let admission = [
        "pod-status-review",
        "pod-status-review-invalid",
        "pvc-status-review",
        "csinode-status-review",
        "mutate-pod-status-review",
    ];
    let mut reviews = Vec::new();
    for path in ["/validate", "/mutate"] {
        for name in admission {
            reviews.push((name, path));
        }
    }
    for name in ["subject-access-review", "subject-access-review-v1beta1"] {
        reviews.push((name, "/authorize"));
    }
    let spec: Vec<Value> = reviews
        .into_iter()
        .map(|(name, path)| {
            let file = examples.join(format!("{name}.json"));
            ensure!(file.exists(), "{} is missing", file.display());
            Ok(json!({"name": name, "path": path, "file": file}))
        })
        .collect::<Result<_>>()?;
    let path = dir.join("reviews.json");
    std::fs::write(&path, serde_json::to_string_pretty(&spec)?)?;
    Ok(path)
}

/// The load client, running.
struct Load {
    process: Process,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    failures: PathBuf,
}

impl Load {
    fn start(fleet: &Fleet, spec: &Path, proto: &str, phase: &str, rate: u32) -> Result<Self> {
        let bin = std::env::var_os("VOLUME_HEALTH_ROLLOUT_BIN")
            .map(PathBuf::from)
            .ok_or_else(|| anyhow!("VOLUME_HEALTH_ROLLOUT_BIN is not set: run `make rollout`"))?;
        let failures = fleet.dir.join(format!("{phase}.failures.jsonl"));
        let log = fleet.dir.join(format!("{phase}.client.log"));
        let mut child = Command::new(bin.join("loadclient"))
            .arg(format!("-target={}", fleet.frontend))
            .arg(format!("-ca={}", fleet.dir.join("ca.crt").display()))
            .arg(format!("-proto={proto}"))
            .arg(format!("-rate={rate}"))
            .arg(format!("-spec={}", spec.display()))
            .arg(format!("-failures={}", failures.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(&log)?)
            .spawn()
            .context("starting the load client")?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let load = Load {
            process: Process {
                name: format!("load client ({phase})"),
                child,
            },
            stdin,
            lines,
            failures,
        };
        let first = load
            .lines
            .recv_timeout(Duration::from_secs(20))
            .map_err(|_| anyhow!("the load client never started its load"))?;
        ensure!(first.contains("\"ready\":true"), "load client: {first}");
        Ok(load)
    }

    /// Stops the load, waits for the reviews in flight; the client's summary.
    fn stop(mut self) -> Result<Value> {
        drop(self.stdin.take());
        let summary = self
            .lines
            .recv_timeout(Duration::from_secs(15))
            .map_err(|_| anyhow!("the load client did not report"))?;
        let status = self.process.wait_exit(Duration::from_secs(5), || Ok(()))?;
        ensure!(status.success(), "the load client exited with {status}");
        Ok(serde_json::from_str(&summary)?)
    }

    fn failures(path: &Path) -> Result<Vec<Value>> {
        std::fs::read_to_string(path)?
            .lines()
            .map(|line| Ok(serde_json::from_str(line)?))
            .collect()
    }
}

/// The figures of one phase, for the report.
struct Figures {
    phase: String,
    restarts: Vec<Restart>,
    summary: Value,
}

fn count(summary: &Value, key: &str) -> i64 {
    summary[key].as_i64().unwrap_or(-1)
}

fn report(figures: &[Figures], crashes: &[(String, Value, usize, Duration)]) {
    eprintln!();
    eprintln!(
        "{:<48} {:>8} {:>7} {:>6} {:>10} {:>8} {:>14} {:>14}",
        "graceful restarts",
        "restarts",
        "sent",
        "failed",
        "new conns",
        "close",
        "LB dropped",
        "exited"
    );
    for f in figures {
        let span = |pick: fn(&Restart) -> Duration| {
            let all: Vec<f64> = f.restarts.iter().map(|r| pick(r).as_secs_f64()).collect();
            let min = all.iter().copied().fold(f64::INFINITY, f64::min);
            let max = all.iter().copied().fold(0.0, f64::max);
            format!("{min:.1}-{max:.1} s")
        };
        eprintln!(
            "{:<48} {:>8} {:>7} {:>6} {:>10} {:>8} {:>14} {:>14}",
            f.phase,
            f.restarts.len(),
            count(&f.summary, "sent"),
            count(&f.summary, "failed"),
            count(&f.summary, "new_connections"),
            count(&f.summary, "connection_close"),
            span(|r| r.left),
            span(|r| r.exited),
        );
    }
    for (phase, summary, in_flight, ready) in crashes {
        eprintln!(
            "{phase}: {} sent, {} failed (all in flight when the endpoint left: {in_flight}; at most {} in flight), replacement ready in {ready:?}",
            count(summary, "sent"),
            count(summary, "failed"),
            count(summary, "max_in_flight"),
        );
    }
    eprintln!();
}

/// The test's directory: removed when it passes, kept (with the ends of its logs printed) when
/// it fails.
struct Scratch {
    dir: PathBuf,
    passed: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.passed {
            let _ = std::fs::remove_dir_all(&self.dir);
            return;
        }
        eprintln!("rollout failed; logs kept in {}", self.dir.display());
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "log" || e == "jsonl"))
            .collect();
        logs.sort();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            if lines.is_empty() {
                continue;
            }
            eprintln!(
                "--- last lines of {}:\n{}",
                log.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            );
        }
    }
}

fn env_number(name: &str, default: u32) -> Result<u32> {
    match std::env::var(name) {
        Ok(value) => value.parse().with_context(|| format!("{name}={value}")),
        Err(_) => Ok(default),
    }
}

#[test]
#[ignore = "starts haproxy, three servers and a load client for minutes: `make rollout`"]
fn rolling_restarts_lose_no_review_and_a_crash_only_what_is_in_flight() -> Result<()> {
    let rate = env_number("ROLLOUT_RATE", 2000)?;
    let rolls = env_number("ROLLOUT_ROLLS", 1)?;
    let binary = std::env::var_os("VOLUME_HEALTH_WEBHOOK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/volume-health-webhook"));
    ensure!(
        binary.exists(),
        "{} is missing: `make rollout` builds it",
        binary.display()
    );
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rollout-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut scratch = Scratch {
        dir: dir.clone(),
        passed: false,
    };
    let deployment = Deployment::read()?;
    eprintln!(
        "the Deployment's server: {} ({:?}); readiness every {:?}, {} failures; grace {:?}; {rate} reviews/s",
        deployment.args.join(" "),
        deployment.env,
        deployment.probe_period,
        deployment.failure_threshold,
        deployment.grace,
    );
    let spec = write_spec(&dir)?;
    let mut fleet = Fleet::start(&dir, binary, deployment)?;

    let mut figures = Vec::new();
    let mut problems = Vec::new();
    for proto in ["h2", "http1"] {
        for leaves in [Leaves::AtOnce, Leaves::AfterProbes] {
            let phase = format!("{proto}, {}", leaves.describe());
            let file = format!("{proto}-{leaves:?}").to_lowercase();
            let load = Load::start(&fleet, &spec, proto, &file, rate)?;
            std::thread::sleep(SETTLE);
            let mut restarts = Vec::new();
            for _ in 0..rolls {
                for index in 0..REPLICAS {
                    let restart = fleet.restart(index, leaves)?;
                    eprintln!(
                        "{phase}: replica {index} dropped by the load balancer after {:.1?}, exited after {:.1?}, successor ready in {:.0?}",
                        restart.left, restart.exited, restart.ready
                    );
                    restarts.push(restart);
                }
            }
            std::thread::sleep(SETTLE);
            let failures_file = load.failures.clone();
            let summary = load.stop()?;
            eprintln!("{phase}: {summary}");
            let failed = count(&summary, "failed");
            if failed != 0 {
                for failure in Load::failures(&failures_file)?.iter().take(10) {
                    eprintln!("  {failure}");
                }
                problems.push(format!("{phase}: {failed} failed reviews"));
            }
            let (h2, h1) = (count(&summary, "http2"), count(&summary, "http1"));
            let expected = if proto == "h2" { (h2, 0) } else { (0, h1) };
            if (h2, h1) != expected || count(&summary, "ok") <= 0 {
                problems.push(format!("{phase}: answered over HTTP/2 {h2}, HTTP/1.1 {h1}"));
            }
            figures.push(Figures {
                phase,
                restarts,
                summary,
            });
        }
    }

    let mut crashes = Vec::new();
    for proto in ["h2", "http1"] {
        let phase = format!("{proto}, SIGKILL of one replica");
        let load = Load::start(&fleet, &spec, proto, &format!("{proto}-kill"), rate)?;
        std::thread::sleep(SETTLE);
        let index = 0;
        let mut process = fleet.replicas[index].process.take().context("running")?;
        process.child.kill()?;
        fleet.set_state(index, "maint")?;
        let left = unix_ns(SystemTime::now() + CRASH_SLACK);
        process.wait_exit(Duration::from_secs(5), || Ok(()))?;
        drop(process);
        fleet.start_replica(index)?;
        let ready = fleet.wait_ready(index, fleet.deployment.probe_period)?;
        fleet.set_state(index, "ready")?;
        fleet.wait_up(index, fleet.deployment.probe_period * 2)?;
        std::thread::sleep(SETTLE);
        let failures_file = load.failures.clone();
        let summary = load.stop()?;
        eprintln!("{phase}: {summary}");
        let failures = Load::failures(&failures_file)?;
        let (in_flight, later): (Vec<&Value>, Vec<&Value>) = failures
            .iter()
            .partition(|f| f["start_ns"].as_i64().is_some_and(|start| start <= left));
        for failure in later.iter().take(10) {
            eprintln!("  lost after the endpoint left: {failure}");
        }
        if !later.is_empty() {
            problems.push(format!(
                "{phase}: {} reviews lost that were sent after the endpoint left",
                later.len()
            ));
        }
        let bound = usize::try_from(count(&summary, "max_in_flight")).unwrap_or(0);
        if in_flight.len() > bound {
            problems.push(format!(
                "{phase}: {} lost, more than the {bound} ever in flight",
                in_flight.len()
            ));
        }
        crashes.push((phase, summary, in_flight.len(), ready));
    }

    report(&figures, &crashes);
    let mut totals: BTreeMap<&str, i64> = BTreeMap::new();
    for f in &figures {
        for key in ["sent", "failed", "wrong"] {
            *totals.entry(key).or_default() += count(&f.summary, key);
        }
    }
    eprintln!("graceful restarts in all: {totals:?}");
    drop(fleet);
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    scratch.passed = true;
    Ok(())
}
