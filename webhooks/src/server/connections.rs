//! Connections: the accept loop under the connection limit, TLS and ALPN, HTTP/1.1 and h2 with
//! their header timeouts, and the drain that asks every client to reconnect.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::telemetry::SERVER_TARGET;

/// A bound port and its address as bound (the port chosen for port 0).
pub(super) struct Listener {
    tcp: TcpListener,
    pub(super) addr: SocketAddr,
}

impl Listener {
    /// Binds `addr`; an error is the system's, for binding or for reading the bound address.
    pub(super) async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let tcp = TcpListener::bind(addr).await?;
        let addr = tcp.local_addr()?;
        Ok(Listener { tcp, addr })
    }
}

/// What a port speaks.
#[derive(Clone)]
pub(super) enum Transport {
    /// HTTP/1.1 (the health port: kubelet probes, Prometheus).
    Plain,
    /// TLS, then the protocol ALPN chose.
    Tls(TlsAcceptor),
}

/// One port: its listener, the bound on its open connections, and their tasks.
pub(super) struct Port {
    listener: Listener,
    transport: Transport,
    app: Router,
    header_timeout: Duration,
    slots: Arc<Semaphore>,
    connections: JoinSet<()>,
    /// Asks every connection's client to reconnect (see [`Server::run`](super::Server::run)).
    /// hyper-util's `GracefulShutdown` would close idle HTTP/1.1 connections at once, under a
    /// client that may be sending on one at that instant, and would take each connection over,
    /// leaving the h2 idle close no way to act on it.
    drain: CancellationToken,
}

impl Port {
    /// `header_timeout` is `--header-read-timeout`, `max_connections` `--max-connections`.
    pub(super) fn new(
        listener: Listener,
        transport: Transport,
        app: Router,
        header_timeout: Duration,
        max_connections: usize,
    ) -> Self {
        Port {
            listener,
            transport,
            app,
            header_timeout,
            slots: Arc::new(Semaphore::new(max_connections.max(1))),
            connections: JoinSet::new(),
            drain: CancellationToken::new(),
        }
    }

    /// Serves connections until `stop` completes, each in its own task; beyond
    /// `max_connections` open at once, new connections wait in the listen backlog.
    pub(super) async fn accept_until(&mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                // Ended connections are collected as they end: the set holds the open ones.
                Some(_) = self.connections.join_next() => {}
                accepted = accept(&self.listener.tcp, &self.slots) => {
                    let Some((stream, peer, permit)) = accepted else { continue };
                    let transport = self.transport.clone();
                    let app = self.app.clone();
                    let header_timeout = self.header_timeout;
                    let drain = self.drain.clone();
                    self.connections.spawn(async move {
                        let _permit = permit;
                        transport.serve(stream, peer, app, header_timeout, &drain).await;
                    });
                }
            }
        }
    }

    /// Asks the client of every connection, open or still to come, to reconnect.
    pub(super) fn drain(&self) {
        self.drain.cancel();
    }

    /// Closes the listener and waits at most `timeout` for the connections still open to
    /// end; how many are still open then (dropped on return).
    pub(super) async fn close(self, timeout: Duration) -> usize {
        let Port {
            listener,
            mut connections,
            ..
        } = self;
        drop(listener);
        tracing::info!(
            target: SERVER_TARGET,
            open = connections.len(),
            "listener closed; waiting for the open connections to end"
        );
        let all_closed = async { while connections.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(timeout, all_closed).await;
        connections.len()
    }
}

/// Waits for a connection slot, then a connection. Accept errors (out of file descriptors,
/// a reset before accept) are logged and skipped after a short pause.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let permit = slots.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, peer)) => {
            let _ = stream.set_nodelay(true);
            Some((stream, peer, permit))
        }
        Err(err) => {
            tracing::warn!(target: SERVER_TARGET, error = %err, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

impl Transport {
    /// Serves one connection until it ends; once `drain` is cancelled, its client is asked to
    /// reconnect. The TLS handshake gets the header timeout, and is completed during the drain
    /// too: the client has a request to send.
    async fn serve(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        app: Router,
        header_timeout: Duration,
        drain: &CancellationToken,
    ) {
        let result = match self {
            Transport::Plain => serve_http1(TokioIo::new(stream), app, header_timeout, drain).await,
            Transport::Tls(acceptor) => {
                let handshake = tokio::time::timeout(header_timeout, acceptor.accept(stream));
                let tls = match handshake.await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(err)) => {
                        tracing::debug!(
                            target: SERVER_TARGET,
                            %peer,
                            error = %err,
                            "TLS handshake failed"
                        );
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(target: SERVER_TARGET, %peer, "TLS handshake timed out");
                        return;
                    }
                };
                // The protocol is the one negotiated by ALPN. Sniffing the connection preface
                // instead waits, without any timeout, for 24 bytes that a silent or slow client
                // never sends, holding a connection slot forever. HTTP/2 over TLS always uses
                // ALPN (RFC 9113, section 3.2), so no ALPN means HTTP/1.1.
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                let io = TokioIo::new(tls);
                if h2 {
                    serve_h2(io, app, header_timeout, drain).await
                } else {
                    serve_http1(io, app, header_timeout, drain).await
                }
            }
        };
        if let Err(err) = result {
            tracing::debug!(
                target: SERVER_TARGET,
                %peer,
                error = %err,
                "connection ended with an error"
            );
        }
    }
}

/// HTTP/1.1 with keep-alive. hyper's header read timeout also closes a keep-alive connection
/// that sends no next request within it.
///
/// Once `drain` is cancelled, every answer carries `Connection: close` and the connection
/// closes after it: HTTP/1.1 has no GOAWAY, and a client may write its next request on an
/// idle keep-alive connection at the very instant the server closes it, a request it will
/// not retry. So the drain never closes an idle connection; it tells the client on the next
/// answer, and the client opens a new connection for the request after.
async fn serve_http1<I>(
    io: I,
    app: Router,
    header_timeout: Duration,
    drain: &CancellationToken,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let draining = drain.clone();
    let app = tower::util::MapResponse::new(app, move |mut response: axum::response::Response| {
        if draining.is_cancelled() {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        response
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    builder
        .serve_connection(io, TowerToHyperService::new(app))
        .await
}

/// h2, closed when idle. hyper has no header read timeout in h2, and its keep-alive PINGs find
/// dead peers, not idle ones: a client that never sends the preface, or no request for a
/// while, would hold its slot until it leaves. So an h2 connection that opens no stream within
/// the header timeout is closed the same way as an HTTP/1.1 one (GOAWAY; streams in flight
/// finish), and one that never made a request is dropped one header timeout after the GOAWAY:
/// hyper's graceful close waits for a preface that may never come.
///
/// Once `drain` is cancelled, a connection gets its GOAWAY as soon as a request has arrived
/// on it, including a connection opened during the drain: h2's graceful GOAWAY (the last
/// stream id at its maximum, then the real one a PING round trip later) serves every stream
/// the client opened before it heard of it, and the client opens a new connection for the
/// next one.
async fn serve_h2<I>(
    io: I,
    app: Router,
    header_timeout: Duration,
    drain: &CancellationToken,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let request_seen = Arc::new(Notify::new());
    let seen = request_seen.clone();
    let app = app.map_request(move |request: http::Request<hyper::body::Incoming>| {
        seen.notify_one();
        request
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let connection = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(connection);
    let idle = tokio::time::sleep(header_timeout);
    tokio::pin!(idle);
    let mut any_request = false;
    let mut closing = false;
    let mut watch_idle = true;
    loop {
        tokio::select! {
            result = connection.as_mut() => return result,
            () = request_seen.notified() => {
                any_request = true;
                idle.as_mut().reset(tokio::time::Instant::now() + header_timeout);
            }
            () = drain.cancelled(), if !closing && any_request => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut idle, if watch_idle => {
                if !closing {
                    tracing::debug!(
                        target: SERVER_TARGET,
                        "no request within the header timeout; closing the connection"
                    );
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                    idle.as_mut().reset(tokio::time::Instant::now() + header_timeout);
                } else if !any_request {
                    return Ok(());
                } else {
                    // Requests in flight finish, or get their 408 from the request timeout.
                    watch_idle = false;
                }
            }
        }
    }
}
