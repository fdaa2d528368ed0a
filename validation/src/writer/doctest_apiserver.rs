// A stand-in apiserver on loopback for the writer's doc tests, which include this file: it is
// not a module of the crate. It answers one request with each of the bodies it is given, then
// stops, and returns the request lines it read.

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
type RequestLines = tokio::task::JoinHandle<std::io::Result<Vec<String>>>;
async fn fake_apiserver(bodies: Vec<String>) -> std::io::Result<(String, RequestLines)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(async move {
        let mut lines = Vec::new();
        for body in bodies {
            let (mut socket, _) = listener.accept().await?;
            let mut request = Vec::new();
            let mut buffer = [0; 4096];
            // Read the head, then as much body as it announces.
            let complete = |request: &[u8]| {
                let text = String::from_utf8_lossy(request).to_ascii_lowercase();
                let Some(end) = text.find("\r\n\r\n") else {
                    return false;
                };
                let length = text[..end]
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .map_or(0, |value| value.trim().parse().unwrap_or(0));
                request.len() >= end + 4 + length
            };
            while !complete(&request) {
                let read = socket.read(&mut buffer).await?;
                if read == 0 {
                    break;
                }
                request.extend_from_slice(&buffer[..read]);
            }
            let text = String::from_utf8_lossy(&request);
            lines.push(text.lines().next().unwrap_or_default().to_owned());
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
            socket.shutdown().await?;
        }
        Ok(lines)
    });
    Ok((url, server))
}
