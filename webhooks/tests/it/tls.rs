//! The server over real TLS: the generated certificate and its CA file, HTTP/1.1 and h2 by
//! ALPN, certificate rotation (kubelet's `..data` symlink swap under load, an in-place
//! rewrite, a broken pair) and client certificates.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use support::{Ca, Pair, Running, assert_allowed, client_config, post, post_on, tls_connect};
use volume_health_webhooks::config::{Cli, Command};
use volume_health_webhooks::server::CertSource;
use volume_health_webhooks::tls::CertificateFiles;

const FAILURES: &str = "volume_health_webhook_tls_certificate_reloads_total{result=\"failure\"}";
const SUCCESSES: &str = "volume_health_webhook_tls_certificate_reloads_total{result=\"success\"}";

/// Started as an operator would try it: no certificate flags, `--self-signed-ca-file`. The
/// CA written there verifies the server under each of its names, in HTTP/1.1 and h2.
#[tokio::test]
async fn self_signed_certificate_verifies_with_the_written_ca_in_h1_and_h2() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("nested/ca.crt");
    let cli = Cli::try_parse_from([
        "volume-health-webhook",
        "serve",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--health-port=0",
        "--feature-gates=CSIVolumeHealth=true",
        &format!("--self-signed-ca-file={}", ca_file.display()),
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        unreachable!("serve")
    };
    let config = args.into_config();
    assert!(matches!(config.certs, CertSource::SelfSigned { .. }));
    let server = Running::start(config).await;
    let ca_pem = std::fs::read_to_string(&ca_file).unwrap();
    assert!(
        ca_pem.starts_with("-----BEGIN CERTIFICATE-----"),
        "{ca_pem}"
    );

    for (alpn, version) in [
        (b"http/1.1".as_slice(), http::Version::HTTP_11),
        (b"h2".as_slice(), http::Version::HTTP_2),
    ] {
        let client = client_config(&ca_pem, None, &[alpn]);
        for name in ["localhost", "127.0.0.1", "::1"] {
            let stream = tls_connect(server.secure, &client, name)
                .await
                .unwrap_or_else(|e| panic!("verifies as {name}: {e}"));
            assert_eq!(support::alpn(&stream).as_deref(), Some(alpn));
            let answer = post_on(stream, "/validate", support::valid_review())
                .await
                .unwrap();
            assert_eq!(answer.version, version);
            assert_allowed(&answer);
        }
        // A name the certificate does not carry fails verification: the check is real.
        assert!(
            tls_connect(server.secure, &client, "webhook.example")
                .await
                .is_err()
        );
    }
    // A client offering no ALPN speaks HTTP/1.1.
    let answer = post(
        server.secure,
        &client_config(&ca_pem, None, &[]),
        "/validate",
        support::valid_review(),
    )
    .await
    .unwrap();
    assert_eq!(answer.version, http::Version::HTTP_11);
    assert_allowed(&answer);
    server.stop().await;
}

/// Lays out a Secret volume as kubelet's AtomicWriter does: the files in a timestamped
/// directory, `..data` pointing at it, `tls.crt -> ..data/tls.crt` in the mount dir.
fn kubelet_publish(mount: &Path, pair: &Pair, stamp: &str) {
    use std::os::unix::fs::symlink;
    let payload = format!("..{stamp}");
    std::fs::create_dir(mount.join(&payload)).unwrap();
    std::fs::write(mount.join(&payload).join("tls.crt"), &pair.cert_pem).unwrap();
    std::fs::write(mount.join(&payload).join("tls.key"), &pair.key_pem).unwrap();
    let old = std::fs::read_link(mount.join("..data")).ok();
    symlink(&payload, mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        if std::fs::symlink_metadata(mount.join(file)).is_err() {
            symlink(Path::new("..data").join(file), mount.join(file)).unwrap();
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(mount.join(old)).unwrap();
    }
}

async fn served_leaf(server: &Running, ca_pem: &str) -> Vec<u8> {
    let stream = tls_connect(
        server.secure,
        &client_config(ca_pem, None, &[]),
        "localhost",
    )
    .await
    .unwrap();
    support::peer_leaf(&stream)
}

async fn wait_for_leaf(server: &Running, ca_pem: &str, leaf: &[u8], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if served_leaf(server, ca_pem).await == leaf {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Waits until the clients have had `count` answers in all.
async fn wait_for_answers(ok: &AtomicUsize, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while ok.load(Ordering::Relaxed) < count {
        assert!(Instant::now() < deadline, "the clients got no answers");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// kubelet's Secret update (new directory, `..data` renamed over) while clients keep
/// connecting: the new pair is served soon after, no request fails, no failure is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_symlink_swap_is_served_without_failing_a_request_under_load() {
    let ca = Ca::new("rotation CA");
    let first = ca.server_pair();
    let second = ca.server_pair();
    let mount = tempfile::tempdir().unwrap();
    kubelet_publish(mount.path(), &first, "2026_11_29_12_00_00.123456789");
    let files = CertificateFiles {
        cert: mount.path().join("tls.crt"),
        key: mount.path().join("tls.key"),
    };
    let server = Running::start(support::config(CertSource::Files(files))).await;
    assert_eq!(served_leaf(&server, &ca.pem).await, first.leaf_der());

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..4 {
        let (stop, ok, ca_pem, addr) = (stop.clone(), ok.clone(), ca.pem.clone(), server.secure);
        let alpn: &[u8] = if i % 2 == 0 { b"h2" } else { b"http/1.1" };
        clients.push(tokio::spawn(async move {
            let client = client_config(&ca_pem, None, &[alpn]);
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match post(addr, &client, "/validate", support::valid_review()).await {
                    Ok(answer) if answer.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures.push(format!("{other:?}")),
                }
            }
            failures
        }));
    }
    // The swap happens while requests are being answered, and more are answered after it.
    wait_for_answers(&ok, 10).await;
    let swapped = Instant::now();
    kubelet_publish(mount.path(), &second, "2026_11_29_12_05_00.987654321");
    assert!(
        wait_for_leaf(
            &server,
            &ca.pem,
            &second.leaf_der(),
            Duration::from_secs(20)
        )
        .await,
        "the new pair is served"
    );
    let took = swapped.elapsed();
    let before = ok.load(Ordering::Relaxed);
    wait_for_answers(&ok, before + 10).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let failures = client.await.unwrap();
        assert!(failures.is_empty(), "requests failed: {failures:?}");
    }
    assert!(took < Duration::from_secs(20), "{took:?}");
    let metrics = server.metrics().await;
    assert_eq!(support::metric(&metrics, SUCCESSES), 1.0, "{metrics}");
    assert_eq!(support::metric(&metrics, FAILURES), 0.0, "{metrics}");
    server.stop().await;
}

const EXPIRY: &str = "volume_health_webhook_tls_certificate_expiration_timestamp_seconds";

/// The expiry gauge follows the certificate in service: set at start, updated on a reload.
#[tokio::test]
async fn certificate_expiry_gauge_follows_each_reload() {
    let ca = Ca::new("expiry CA");
    let (first, second) = (ca.server_pair_expiring(2030), ca.server_pair_expiring(2031));
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &first);
    let server = Running::start(support::config(CertSource::Files(files))).await;
    let metrics = server.metrics().await;
    // 2030-01-01T00:00:00Z
    assert_eq!(
        support::metric(&metrics, EXPIRY),
        1_893_456_000.0,
        "{metrics}"
    );
    assert_eq!(support::metric(&metrics, SUCCESSES), 0.0, "{metrics}");
    assert!(
        metrics.contains(SUCCESSES) && metrics.contains(FAILURES),
        "{metrics}"
    );
    support::write_pair(dir.path(), &second);
    assert!(
        wait_for_leaf(
            &server,
            &ca.pem,
            &second.leaf_der(),
            Duration::from_secs(20)
        )
        .await
    );
    let metrics = server.metrics().await;
    // 2031-01-01T00:00:00Z
    assert_eq!(
        support::metric(&metrics, EXPIRY),
        1_924_992_000.0,
        "{metrics}"
    );
    assert_eq!(support::metric(&metrics, SUCCESSES), 1.0, "{metrics}");
    server.stop().await;
}

/// A pair rewritten in place (same files, new contents) is served.
#[tokio::test]
async fn in_place_rewrite_is_served() {
    let ca = Ca::new("rewrite CA");
    let first = ca.server_pair();
    let second = ca.server_pair();
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &first);
    let server = Running::start(support::config(CertSource::Files(files))).await;
    assert_eq!(served_leaf(&server, &ca.pem).await, first.leaf_der());
    support::write_pair(dir.path(), &second);
    assert!(
        wait_for_leaf(
            &server,
            &ca.pem,
            &second.leaf_der(),
            Duration::from_secs(20)
        )
        .await
    );
    // Rewritten one file after the other, never counted as broken.
    let metrics = server.metrics().await;
    assert_eq!(support::metric(&metrics, SUCCESSES), 1.0, "{metrics}");
    assert_eq!(support::metric(&metrics, FAILURES), 0.0, "{metrics}");
    let answer = post(
        server.secure,
        &client_config(&ca.pem, None, &[]),
        "/validate",
        support::valid_review(),
    )
    .await
    .unwrap();
    assert_allowed(&answer);
    server.stop().await;
}

/// A broken new pair (garbage, then a certificate with another pair's key) is logged and
/// counted once each; the last good pair keeps serving; a good pair afterwards is served.
#[tokio::test]
async fn broken_pair_is_counted_and_the_last_good_pair_keeps_serving() {
    let ca = Ca::new("broken CA");
    let good = ca.server_pair();
    let other = ca.server_pair();
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &good);
    let server = Running::start(support::config(CertSource::Files(files.clone()))).await;

    std::fs::write(&files.cert, "not a certificate").unwrap();
    let metrics = wait_for_metric(&server, FAILURES, 1.0).await;
    assert_eq!(support::metric(&metrics, SUCCESSES), 0.0, "{metrics}");
    assert_eq!(served_leaf(&server, &ca.pem).await, good.leaf_der());

    // A certificate with a key that is not its own.
    std::fs::write(&files.cert, &other.cert_pem).unwrap();
    let metrics = wait_for_metric(&server, FAILURES, 2.0).await;
    assert_eq!(support::metric(&metrics, SUCCESSES), 0.0, "{metrics}");
    assert_eq!(served_leaf(&server, &ca.pem).await, good.leaf_der());
    // Counted once per change, not once per poll: four more polls see the same broken pair.
    tokio::time::sleep(
        4 * support::config(CertSource::SelfSigned { ca_file: None }).tls_reload_interval,
    )
    .await;
    assert_eq!(support::metric(&server.metrics().await, FAILURES), 2.0);
    let answer = post(
        server.secure,
        &client_config(&ca.pem, None, &[]),
        "/validate",
        support::valid_review(),
    )
    .await
    .unwrap();
    assert_allowed(&answer);

    std::fs::write(&files.key, &other.key_pem).unwrap();
    assert!(wait_for_leaf(&server, &ca.pem, &other.leaf_der(), Duration::from_secs(20)).await);
    let metrics = server.metrics().await;
    assert_eq!(support::metric(&metrics, SUCCESSES), 1.0, "{metrics}");
    assert_eq!(support::metric(&metrics, FAILURES), 2.0, "{metrics}");
    server.stop().await;
}

async fn wait_for_metric(server: &Running, sample: &str, value: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = server.metrics().await;
        if support::metric(&metrics, sample) >= value || Instant::now() > deadline {
            assert_eq!(support::metric(&metrics, sample), value, "{metrics}");
            return metrics;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `--client-ca-file`: a client certificate from that CA is accepted; no certificate, or one
/// from another CA, gets no answer.
#[tokio::test]
async fn client_certificates_are_required_and_verified() {
    let server_ca = Ca::new("serving CA");
    let client_ca = Ca::new("apiserver client CA");
    let stranger_ca = Ca::new("another CA");
    let dir = tempfile::tempdir().unwrap();
    let config = support::config_with_client_ca(dir.path(), &server_ca, &client_ca);
    let server = Running::start(config).await;

    for alpn in [b"http/1.1".as_slice(), b"h2".as_slice()] {
        let apiserver = client_ca.client_pair("kube-apiserver");
        let trusted = client_config(&server_ca.pem, Some(&apiserver), &[alpn]);
        let answer = post(
            server.secure,
            &trusted,
            "/validate",
            support::valid_review(),
        )
        .await
        .unwrap();
        assert_allowed(&answer);

        let anonymous = client_config(&server_ca.pem, None, &[alpn]);
        let refused = post(
            server.secure,
            &anonymous,
            "/validate",
            support::valid_review(),
        )
        .await;
        assert!(refused.is_err(), "no client certificate: {refused:?}");

        let impostor = stranger_ca.client_pair("kube-apiserver");
        let untrusted = client_config(&server_ca.pem, Some(&impostor), &[alpn]);
        let refused = post(
            server.secure,
            &untrusted,
            "/validate",
            support::valid_review(),
        )
        .await;
        assert!(refused.is_err(), "certificate from another CA: {refused:?}");
    }
    server.stop().await;
}

/// A pair that cannot serve stops the server at startup, with the reason, as a reload refuses
/// it: expired, or signed by another CA than the `ca.crt` beside it.
#[tokio::test]
async fn a_certificate_that_cannot_serve_stops_the_server_at_startup() {
    use volume_health_webhooks::server::Server;
    let ca = Ca::new("startup CA");
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &ca.server_pair_expiring(2020));
    let Err(err) = Server::bind(support::config(CertSource::Files(files))).await else {
        panic!("an expired certificate was served");
    };
    let message = volume_health_validation::error::chain(&err);
    assert!(message.contains("not now"), "{message}");

    let other = Ca::new("another CA");
    let files = support::write_pair(dir.path(), &other.server_pair());
    std::fs::write(dir.path().join("ca.crt"), &ca.pem).unwrap();
    let Err(err) = Server::bind(support::config(CertSource::Files(files.clone()))).await else {
        panic!("a certificate of another CA was served");
    };
    let message = volume_health_validation::error::chain(&err);
    assert!(
        message.contains("does not verify against") && message.contains("ca.crt"),
        "{message}"
    );
    // Signed by the CA beside it: served.
    support::write_pair(dir.path(), &ca.server_pair());
    let server = Running::start(support::config(CertSource::Files(files))).await;
    assert_eq!(
        support::metric(&server.metrics().await, FAILURES),
        0.0,
        "nothing refused"
    );
    server.stop().await;
}

/// A reload whose chain does not verify against the `ca.crt` beside it (cert-manager's Secret
/// carries one) is kept out and counted; the CA's own next pair is served.
#[tokio::test]
async fn a_reload_signed_by_another_ca_is_kept_out_and_counted() {
    let ca = Ca::new("trusted CA");
    let first = ca.server_pair();
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &first);
    std::fs::write(dir.path().join("ca.crt"), &ca.pem).unwrap();
    let server = Running::start(support::config(CertSource::Files(files.clone()))).await;

    let stranger = Ca::new("stranger CA").server_pair();
    support::write_pair(dir.path(), &stranger);
    let metrics = wait_for_metric(&server, FAILURES, 1.0).await;
    assert_eq!(support::metric(&metrics, SUCCESSES), 0.0, "{metrics}");
    assert_eq!(served_leaf(&server, &ca.pem).await, first.leaf_der());

    let next = ca.server_pair();
    support::write_pair(dir.path(), &next);
    assert!(wait_for_leaf(&server, &ca.pem, &next.leaf_der(), Duration::from_secs(20)).await);
    let metrics = server.metrics().await;
    assert_eq!(support::metric(&metrics, SUCCESSES), 1.0, "{metrics}");
    assert_eq!(support::metric(&metrics, FAILURES), 1.0, "{metrics}");
    server.stop().await;
}
