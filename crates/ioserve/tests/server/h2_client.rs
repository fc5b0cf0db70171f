//! An HTTP/2 client for the tests: the `h2` crate over tokio-rustls, trusting a test
//! certificate, offering only `h2` by ALPN. It returns the same [`Response`] as the raw
//! HTTP/1.1 client, so one assertion checks both protocols.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use hyper::http;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::support::Response;

/// A current-thread runtime for one test's client work.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A TLS connection to `addr` (as `localhost`) that chose `h2`, trusting `ca` (PEM).
pub async fn connect_tls(addr: SocketAddr, ca: &str) -> TlsStream<TcpStream> {
    let mut config = crate::support::tls_client_config(ca);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    // As browsers and curl do: without it, a WINDOW_UPDATE written while an earlier
    // small frame is unacknowledged waits for the server's delayed ACK (Nagle), up to
    // 40 ms a time, and a multi-megabyte body took a tenth of a second.
    tcp.set_nodelay(true).unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "the server chose h2"
    );
    tls
}

/// An HTTP/2 connection to `addr`, driven by a task of the current runtime.
pub async fn connect(addr: SocketAddr, ca: &str) -> h2::client::SendRequest<Bytes> {
    let tls = connect_tls(addr, ca).await;
    let (client, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A request for `path` with `headers`, and no body.
pub fn request_of(method: &str, path: &str, headers: &[(&str, &str)]) -> http::Request<()> {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(()).unwrap()
}

/// Sends `request` on `client` and reads the whole response.
pub async fn exchange(
    client: &mut h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
) -> Result<Response, h2::Error> {
    let (response, _) = client.send_request(request, true)?;
    let response = response.await?;
    let status = response.status().as_u16();
    let headers = Response::header_pairs(response.headers());
    let mut stream = response.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk?;
        body.extend_from_slice(&chunk);
        let _ = stream.flow_control().release_capacity(chunk.len());
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// `METHOD path` with `headers` over HTTP/2 on a new TLS connection to `addr`, trusting
/// `ca` (PEM).
pub fn request(
    addr: SocketAddr,
    ca: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    runtime().block_on(async {
        let mut client = connect(addr, ca).await;
        let request = request_of(method, path, headers);
        exchange(&mut client, request)
            .await
            .unwrap_or_else(|error| panic!("{method} {path} over HTTP/2: {error}"))
    })
}
