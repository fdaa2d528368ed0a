//! Connections: the accept loop under the connection limits, TLS and ALPN, HTTP/1.1 and h2 with
//! their header and idle timeouts and their buffers bounded, and the drain that asks every
//! client to reconnect.
//!
//! What one connection can make the process hold is bounded before any handler reads it: the
//! HTTP/1.1 read buffer and head ([`H1_MAX_BUF`], [`H1_MAX_BUF_PLAIN`], [`H1_MAX_HEAD`]), the h2
//! flow-control windows (a client cannot send more than [`H2_CONNECTION_WINDOW`] unread bytes,
//! whatever its streams), its streams ([`H2_MAX_STREAMS`]) and header lists
//! ([`H2_MAX_HEADER_LIST`]). Bodies, once read, are the body budget's (`--max-in-flight-bytes`).
//!
//! A full port keeps no new client out for long while sockets that never sent a request hold
//! its slots: when every slot is taken (or, with `--max-connections-per-peer`, a peer has that
//! many open), the oldest connection that has not yet sent a whole request head (still in its
//! handshake, or sending its first head) is closed to make room. A probe or the apiserver is
//! then served beside a thousand half-open sockets. A connection that has sent a request is
//! never closed to make room: its client may be writing its next request on it at that
//! instant, and neither Go nor client-go retries a POST on a connection closed under it. It
//! ends by its idle timeout, or by `Connection: close` on an answer during a drain.
//!
//! With `--client-ca-file`, every client must present a certificate from it (the apiserver,
//! when the installs turn client certificates on): any other never completes its handshake,
//! so never sends a request, and its connection is always one to close for a new one. Nor is
//! an authenticated connection ever closed to make room, even before its first request: no
//! number of other clients can keep the apiserver out.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::handlers::Peer;
use crate::telemetry::SERVER_TARGET;

/// Most bytes hyper buffers of an HTTP/1.1 connection's input on the webhook port: a head, or
/// body bytes not read yet.
const H1_MAX_BUF: usize = 64 * 1024;
/// The same on the health port, whose requests are a few hundred bytes: hyper's smallest.
const H1_MAX_BUF_PLAIN: usize = 8 * 1024;
/// Most bytes of an HTTP/1.1 request's head; larger gets 431. The apiserver's are under 1 KiB.
const H1_MAX_HEAD: usize = 8 * 1024;
/// The h2 flow-control window of each stream: what a client may send on it before the handler
/// reads. h2's own default.
const H2_STREAM_WINDOW: u32 = 64 * 1024;
/// The h2 window of the whole connection: the most unread bytes a client can make the server
/// hold, on all its streams together (hyper's default is 1 MiB per stream and per connection).
/// One stream's window: a body arrives at full speed on one stream at a time, which is how the
/// apiserver sends them.
const H2_CONNECTION_WINDOW: u32 = 64 * 1024;
/// Most h2 streams open at once on a connection (hyper's default is 200). The apiserver opens
/// another connection when it needs more.
const H2_MAX_STREAMS: u32 = 32;
/// Most bytes of an h2 request's header list (hyper's default is 16 MiB).
const H2_MAX_HEADER_LIST: u32 = 16 * 1024;
/// Most bytes of an h2 answer queued on a stream for a client that does not read.
const H2_MAX_SEND_BUF: usize = 64 * 1024;

/// The timeouts of a connection.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    /// The TLS handshake, and a request's head from its first byte (the first request's from
    /// the handshake).
    pub(super) header: Duration,
    /// A keep-alive connection with no request under way, from its last answer to the first
    /// byte of the next request. Longer than a client's own idle timeout (Go's is 90 s), so
    /// that the client, not the server, closes an idle connection: a server that closes one
    /// races a request the client may be writing on it at that instant.
    pub(super) idle: Duration,
}

/// The connection limits of a port.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// `--max-connections`.
    pub(super) connections: usize,
    /// `--max-connections-per-peer`; 0: none.
    pub(super) per_peer: usize,
}

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
    timeouts: Timeouts,
    per_peer: usize,
    slots: Arc<Semaphore>,
    table: Arc<Table>,
    connections: JoinSet<()>,
    /// Asks every connection's client to reconnect (see [`Server::run`](super::Server::run)).
    /// hyper-util's `GracefulShutdown` would close idle HTTP/1.1 connections at once, under a
    /// client that may be sending on one at that instant, and would take each connection over,
    /// leaving the h2 idle close no way to act on it.
    drain: CancellationToken,
}

impl Port {
    /// A port serving `app` on `listener`.
    pub(super) fn new(
        listener: Listener,
        transport: Transport,
        app: Router,
        timeouts: Timeouts,
        limits: Limits,
    ) -> Self {
        Port {
            listener,
            transport,
            app,
            timeouts,
            per_peer: limits.per_peer,
            slots: Arc::new(Semaphore::new(limits.connections.max(1))),
            table: Arc::new(Table::default()),
            connections: JoinSet::new(),
            drain: CancellationToken::new(),
        }
    }

    /// Serves connections until `stop` completes, each in its own task. With every slot
    /// taken, the oldest connection that has not yet sent a whole request head is closed for
    /// the next one; with none such, new connections wait in the listen backlog. With
    /// `--max-connections-per-peer`, a peer with that many open likewise loses its oldest such
    /// connection to its new one, or, with none, the new one is closed.
    pub(super) async fn accept_until(&mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            // Ended connections are collected here, not raced against an accept: a connection
            // accepted and waiting for its slot is never dropped for another's end.
            while self.connections.try_join_next().is_some() {}
            let (stream, peer) = tokio::select! {
                () = &mut stop => return,
                Some(_) = self.connections.join_next() => continue,
                accepted = self.listener.tcp.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::warn!(target: SERVER_TARGET, error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            let permit = tokio::select! {
                () = &mut stop => return,
                permit = slot(&self.slots, &self.table) => permit,
            };
            let Some(entry) = self.table.admit(peer.ip(), self.per_peer) else {
                tracing::debug!(
                    target: SERVER_TARGET,
                    %peer,
                    "peer has --max-connections-per-peer requests under way; connection closed"
                );
                continue;
            };
            let transport = self.transport.clone();
            let app = self.app.clone();
            let timeouts = self.timeouts;
            let drain = self.drain.clone();
            self.connections.spawn(async move {
                let _permit = permit;
                let activity = entry.activity.clone();
                let evicted = activity.evict.clone();
                tokio::select! {
                    () = transport.serve(stream, peer, app, timeouts, &drain, activity) => {}
                    () = evicted.cancelled() => {
                        tracing::debug!(
                            target: SERVER_TARGET,
                            %peer,
                            "connection without a request closed to make room"
                        );
                    }
                }
                drop(entry);
            });
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

/// A slot for a connection that is here, closing the oldest connection that has not yet
/// sent a whole request head when none is free (only then: never ahead of a connection). With
/// none to close, it waits for one, and the next connections wait in the listen backlog.
async fn slot(slots: &Arc<Semaphore>, table: &Table) -> OwnedSemaphorePermit {
    loop {
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return permit;
        }
        let evicted = table.evict_oldest_idle(None);
        // The evicted connection's task ends at once and frees its slot; with none to close,
        // a connection that ends frees one, and one that turns idle is closed on the next look.
        let wait = if evicted { Duration::MAX } else { EVICT_RETRY };
        // The semaphore is never closed.
        if let Ok(Ok(permit)) = tokio::time::timeout(wait, slots.clone().acquire_owned()).await {
            return permit;
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
        timeouts: Timeouts,
        drain: &CancellationToken,
        activity: Arc<Activity>,
    ) {
        let stream = Watched {
            inner: stream,
            activity: activity.clone(),
        };
        let result = match self {
            Transport::Plain => {
                serve_http1(
                    TokioIo::new(stream),
                    H1_MAX_BUF_PLAIN,
                    peer.ip(),
                    app,
                    timeouts,
                    drain,
                    activity,
                )
                .await
            }
            Transport::Tls(acceptor) => {
                let handshake = tokio::time::timeout(timeouts.header, acceptor.accept(stream));
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
                // A certificate here was verified against `--client-ca-file`: the client is
                // one the installs trust, the apiserver.
                if tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|chain| !chain.is_empty())
                {
                    activity.authenticated.store(true, Ordering::Release);
                }
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                let io = TokioIo::new(tls);
                if h2 {
                    serve_h2(io, peer.ip(), app, timeouts, drain, activity).await
                } else {
                    serve_http1(io, H1_MAX_BUF, peer.ip(), app, timeouts, drain, activity).await
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

/// HTTP/1.1 with keep-alive, its timeouts kept here rather than by hyper: hyper's header read
/// timeout also runs while a keep-alive connection waits for its next request, which would make
/// the idle timeout the header timeout. So a request's head gets `timeouts.header` from its
/// first byte (the first request's from the handshake), and a connection with no request under
/// way gets `timeouts.idle` from its last answer to that first byte; past either, it closes.
///
/// Once `drain` is cancelled, every answer carries `Connection: close` and the connection
/// closes after it: HTTP/1.1 has no GOAWAY, and a client may write its next request on an
/// idle keep-alive connection at the very instant the server closes it, a request it will
/// not retry. So the drain never closes an idle connection; it tells the client on the next
/// answer, and the client opens a new connection for the request after.
async fn serve_http1<I>(
    io: I,
    max_buf: usize,
    peer: IpAddr,
    app: Router,
    timeouts: Timeouts,
    drain: &CancellationToken,
    activity: Arc<Activity>,
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
    let app = counted(app, peer, &activity);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .max_buf_size(max_buf)
        .max_header_size(H1_MAX_HEAD)
        .keep_alive(true);
    let connection = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(connection);
    let now = tokio::time::Instant::now;
    let timer = tokio::time::sleep(timeouts.header);
    tokio::pin!(timer);
    let mut phase = Phase::Head;
    // The answers and reads seen when the connection last turned idle: one more read is the
    // next request's first byte. Counts, not the notifications, tell what happened: two
    // changes may come with one wakeup.
    let mut answered_seen = 0;
    let mut reads_when_idle = 0;
    loop {
        tokio::select! {
            result = connection.as_mut() => return result,
            () = activity.changed.notified() => {
                let busy = activity.in_flight.load(Ordering::Acquire) > 0;
                let answered = activity.answered.load(Ordering::Acquire);
                let reads = activity.reads.load(Ordering::Acquire);
                if busy {
                    phase = Phase::Busy;
                } else if answered != answered_seen {
                    answered_seen = answered;
                    phase = Phase::Idle;
                    reads_when_idle = reads;
                    timer.as_mut().reset(now() + timeouts.idle);
                } else if phase == Phase::Idle && reads != reads_when_idle {
                    phase = Phase::Head;
                    timer.as_mut().reset(now() + timeouts.header);
                }
            }
            () = &mut timer, if phase != Phase::Busy => {
                tracing::debug!(
                    target: SERVER_TARGET,
                    phase = ?phase,
                    "no request head within the header timeout, or idle past the idle timeout; closing"
                );
                return Ok(());
            }
        }
    }
}

/// Where an HTTP/1.1 connection is between requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's head to be complete.
    Head,
    /// A request under way: its body is bounded by `--request-timeout`.
    Busy,
    /// No request under way, no byte of the next one yet.
    Idle,
}

/// `app`, counting the requests under way on `activity`, each request told its client's
/// address (for the body budget's shares).
fn counted<S>(
    app: S,
    peer: IpAddr,
    activity: &Arc<Activity>,
) -> impl tower::Service<
    http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>>
             + Send
             + 'static,
> + Clone
+ Send
+ 'static
where
    S: tower::Service<
            http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let activity = activity.clone();
    tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(Peer {
            addr: peer,
            certified: activity.authenticated.load(Ordering::Acquire),
        });
        let mut app = app.clone();
        let under_way = UnderWay::start(activity.clone());
        async move {
            let response = app.call(request).await;
            drop(under_way);
            response
        }
    })
}

/// A request under way on a connection, from its head to its answer.
struct UnderWay(Arc<Activity>);

impl UnderWay {
    fn start(activity: Arc<Activity>) -> Self {
        // A whole head arrived: the connection is one its client may reuse.
        activity.headed.store(true, Ordering::Release);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.changed.notify_one();
        UnderWay(activity)
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.answered.fetch_add(1, Ordering::AcqRel);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// h2, closed when idle. hyper has no header read timeout in h2, and its keep-alive PINGs find
/// dead peers, not idle ones: a client that never sends the preface, or no request for a
/// while, would hold its slot until it leaves. So an h2 connection that opens no stream within
/// the header timeout, or no new one within the idle timeout after its last, is closed the same
/// way as an HTTP/1.1 one (GOAWAY; streams in flight finish), and one that never made a request
/// is dropped one header timeout after the GOAWAY: hyper's graceful close waits for a preface
/// that may never come.
///
/// Once `drain` is cancelled, a connection gets its GOAWAY as soon as a request has arrived
/// on it, including a connection opened during the drain: h2's graceful GOAWAY (the last
/// stream id at its maximum, then the real one a PING round trip later) serves every stream
/// the client opened before it heard of it, and the client opens a new connection for the
/// next one.
async fn serve_h2<I>(
    io: I,
    peer: IpAddr,
    app: Router,
    timeouts: Timeouts,
    drain: &CancellationToken,
    activity: Arc<Activity>,
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
    let app = counted(app, peer, &activity);
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_LIST)
        .max_send_buf_size(H2_MAX_SEND_BUF);
    let connection = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(connection);
    let idle = tokio::time::sleep(timeouts.header);
    tokio::pin!(idle);
    let mut any_request = false;
    let mut closing = false;
    let mut watch_idle = true;
    loop {
        tokio::select! {
            result = connection.as_mut() => return result,
            () = request_seen.notified() => {
                any_request = true;
                idle.as_mut().reset(tokio::time::Instant::now() + timeouts.idle);
            }
            () = drain.cancelled(), if !closing && any_request => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut idle, if watch_idle => {
                if activity.in_flight.load(Ordering::Acquire) > 0 && !closing {
                    // Streams under way: idle counts from the last of them.
                    idle.as_mut().reset(tokio::time::Instant::now() + timeouts.idle);
                } else if !closing {
                    tracing::debug!(
                        target: SERVER_TARGET,
                        "no request within the header or idle timeout; closing the connection"
                    );
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                    idle.as_mut().reset(tokio::time::Instant::now() + timeouts.header);
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

/// How long the accept loop waits for a slot before looking again for a connection to close.
const EVICT_RETRY: Duration = Duration::from_millis(50);

/// What the accept loop and a connection's task share: whether it has a request under way,
/// whether bytes arrived, and the order to close it.
#[derive(Default)]
pub(super) struct Activity {
    /// Requests (h2: streams) under way, from their head to their answer.
    in_flight: AtomicUsize,
    /// Requests answered.
    answered: AtomicU64,
    /// Reads that returned bytes.
    reads: AtomicU64,
    /// Told of every change of the two above.
    changed: Notify,
    /// Closes the connection to make room (see [`Table`]).
    evict: CancellationToken,
    /// Whether a whole request head has arrived on it: from then on it is never closed to
    /// make room.
    headed: AtomicBool,
    /// Whether its client presented a certificate from `--client-ca-file`.
    authenticated: AtomicBool,
}

/// The open connections of a port, oldest first, and how many each peer has.
#[derive(Default)]
struct Table {
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next_id: u64,
    open: BTreeMap<u64, (IpAddr, Arc<Activity>)>,
    per_peer: HashMap<IpAddr, usize>,
}

/// A connection in the [`Table`]; leaves it when dropped.
struct Entry {
    table: Arc<Table>,
    id: u64,
    activity: Arc<Activity>,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        // The table holds plain counts: one left by a panicking thread is still right.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Enters a connection from `peer`. With `per_peer` (not 0) there already, the peer's
    /// oldest connection that has not yet sent a whole request head is closed for it; with
    /// none such, `None`: the new one is refused.
    fn admit(self: &Arc<Self>, peer: IpAddr, per_peer: usize) -> Option<Entry> {
        let mut inner = self.lock();
        if per_peer > 0
            && inner.per_peer.get(&peer).copied().unwrap_or(0) >= per_peer
            && !Self::evict_in(&mut inner, Some(peer))
        {
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let activity = Arc::new(Activity::default());
        inner.open.insert(id, (peer, activity.clone()));
        *inner.per_peer.entry(peer).or_default() += 1;
        Some(Entry {
            table: self.clone(),
            id,
            activity,
        })
    }

    /// Closes the oldest connection (of `peer`, when given) that has not yet sent a whole
    /// request head and whose client is not authenticated; whether there was one.
    fn evict_oldest_idle(&self, peer: Option<IpAddr>) -> bool {
        Self::evict_in(&mut self.lock(), peer)
    }

    fn evict_in(inner: &mut TableInner, peer: Option<IpAddr>) -> bool {
        let oldest = inner.open.iter().find(|(_, (ip, activity))| {
            peer.is_none_or(|peer| *ip == peer)
                && !activity.headed.load(Ordering::Acquire)
                && !activity.authenticated.load(Ordering::Acquire)
                && !activity.evict.is_cancelled()
        });
        let Some((&id, _)) = oldest else {
            return false;
        };
        if let Some((ip, activity)) = inner.open.remove(&id) {
            activity.evict.cancel();
            Self::leave(inner, ip);
        }
        true
    }

    fn leave(inner: &mut TableInner, peer: IpAddr) {
        if let Some(count) = inner.per_peer.get_mut(&peer) {
            *count -= 1;
            if *count == 0 {
                inner.per_peer.remove(&peer);
            }
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut inner = self.table.lock();
        // An evicted connection left the table already.
        if let Some((peer, _)) = inner.open.remove(&self.id) {
            Table::leave(&mut inner, peer);
        }
    }
}

/// A socket whose reads are counted in its [`Activity`], for the HTTP/1.1 idle timeout.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.reads.fetch_add(1, Ordering::AcqRel);
            self.activity.changed.notify_one();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
