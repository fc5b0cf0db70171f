//! An HTTP/3 client for the tests: quinn and h3 over UDP, trusting a test certificate,
//! offering ALPN `h3`. It returns the same [`Response`] as the HTTP/1.1 and HTTP/2
//! clients, so one assertion checks every protocol.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{BufMut as _, Bytes};
use hyper::http;

use crate::h2_client::{request_of, runtime};
use crate::support::Response;

/// A QUIC endpoint on an ephemeral UDP port of 127.0.0.1, trusting `ca` (PEM).
pub fn endpoint(ca: &str) -> quinn::Endpoint {
    let mut tls = crate::support::tls_client_config(ca);
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let tls = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(tls)));
    endpoint
}

/// The request sender of an HTTP/3 connection to `addr` (as `localhost`) from
/// `endpoint`; its driver runs in a task of the current runtime.
pub async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
) -> h3::client::SendRequest<h3_quinn::OpenStreams, Bytes> {
    let connection = endpoint.connect(addr, "localhost").unwrap().await.unwrap();
    let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(connection))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    sender
}

/// Sends `request` on `sender` and reads the whole response.
pub async fn exchange(
    sender: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    request: http::Request<()>,
) -> Result<Response, h3::error::StreamError> {
    let mut stream = sender.send_request(request).await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    let status = response.status().as_u16();
    let headers = Response::header_pairs(response.headers());
    let mut body = Vec::new();
    while let Some(chunk) = stream.recv_data().await? {
        body.put(chunk);
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// `METHOD path` with `headers` over HTTP/3 on a new QUIC connection to `addr`,
/// trusting `ca` (PEM).
pub fn request(
    addr: SocketAddr,
    ca: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    runtime().block_on(async {
        let endpoint = endpoint(ca);
        let mut sender = connect(&endpoint, addr).await;
        let request = request_of(method, path, headers);
        let response = exchange(&mut sender, request)
            .await
            .unwrap_or_else(|error| panic!("{method} {path} over HTTP/3: {error}"));
        drop(sender);
        endpoint.close(0u32.into(), b"");
        response
    })
}
