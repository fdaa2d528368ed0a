//! A small HTTPS client of the apiserver and of etcd's JSON gateway, for what kube-rs does not
//! do: impersonation of any user with the admin's certificate, and the raw `metav1.Status` of
//! an answer.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::pki::KeyPairFiles;

/// Every request is bounded: a stuck apiserver fails the test instead of hanging it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The username of the admin's client certificate: in `system:masters`, so it may impersonate.
pub const ADMIN: &str = "system:admin";

/// Who a request is sent as: the admin itself, or a user it impersonates.
#[derive(Clone, Debug)]
pub struct User {
    /// The username.
    pub name: String,
    /// The groups (`system:authenticated` is added by the apiserver).
    pub groups: Vec<String>,
}

/// An HTTPS client of the apiserver with the admin's client certificate.
pub struct Api {
    addr: SocketAddr,
    tls: TlsConnector,
}

impl Api {
    pub(super) fn new(addr: SocketAddr, ca: &Path, admin: &KeyPairFiles) -> Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_file(ca)?)?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_file(&admin.cert)?],
            PrivateKeyDer::from_pem_file(&admin.key)?,
        )?;
        Ok(Api {
            addr,
            tls: TlsConnector::from(Arc::new(config)),
        })
    }

    /// Sends one request on a connection of its own; answers the status code and the JSON body
    /// (`Null` when the body is not JSON).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        user: Option<&User>,
    ) -> Result<(u16, Value)> {
        let (status, _, body) = self.send_warned(method, path, body, user).await?;
        Ok((status, body))
    }

    /// A GET as the admin; answers the status code and the body as text (`/metrics`).
    pub async fn get_text(&self, path: &str) -> Result<(u16, String)> {
        let tcp = TcpStream::connect(self.addr).await?;
        let tls = self
            .tls
            .connect(ServerName::IpAddress(self.addr.ip().into()), tcp)
            .await?;
        let (status, body) = exchange_bytes(tls, Method::GET, path, None, &[]).await?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// As [`send`](Self::send), with the values of the answer's `Warning` headers.
    pub async fn send_warned(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        user: Option<&User>,
    ) -> Result<(u16, Vec<String>, Value)> {
        let mut headers = Vec::new();
        if let Some(user) = user.filter(|user| user.name != ADMIN) {
            headers.push(("Impersonate-User", user.name.clone()));
            // The apiserver adds system:authenticated itself.
            for group in user.groups.iter().filter(|g| *g != "system:authenticated") {
                headers.push(("Impersonate-Group", group.clone()));
            }
        }
        let tcp = TcpStream::connect(self.addr).await?;
        let tls = self
            .tls
            .connect(ServerName::IpAddress(self.addr.ip().into()), tcp)
            .await?;
        let (status, warnings, body) = exchange_parts(tls, method, path, body, &headers).await?;
        Ok((
            status,
            warnings,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        ))
    }
}

/// One request on a plain connection (etcd's gateway, a health port).
pub(crate) async fn send_plain(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value)> {
    let tcp = TcpStream::connect(addr).await?;
    exchange(tcp, method, path, body, &[]).await
}

async fn exchange<S>(
    io: S,
    method: Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, String)],
) -> Result<(u16, Value)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (status, body) = exchange_bytes(io, method, path, body, headers).await?;
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// One request; answers the status code and the body's bytes.
pub(crate) async fn exchange_bytes<S>(
    io: S,
    method: Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, String)],
) -> Result<(u16, Bytes)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (status, _, body) = exchange_parts(io, method, path, body, headers).await?;
    Ok((status, body))
}

/// One request; answers the status code, the `Warning` headers' values and the body's bytes.
async fn exchange_parts<S>(
    io: S,
    method: Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, String)],
) -> Result<(u16, Vec<String>, Bytes)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let run = async {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        let driver = tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("accept", "application/json");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let bytes = match body {
            Some(body) => {
                request = request.header("content-type", "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let response = sender.send_request(request.body(Full::new(bytes))?).await?;
        let status = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .collect();
        let body = response.into_body().collect().await?.to_bytes();
        driver.abort();
        anyhow::Ok((status, warnings, body))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, run)
        .await
        .map_err(|_| anyhow!("{path}: no answer within {REQUEST_TIMEOUT:?}"))?
}

/// A GET on a plain connection; answers the status code and the body as text.
pub(crate) async fn get_text(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let tcp = TcpStream::connect(addr).await?;
    let (status, body) = exchange_bytes(tcp, Method::GET, path, None, &[]).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
