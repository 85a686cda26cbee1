//! An HTTPS client for the server under test, over HTTP/1.1 or over h2 as kube-aggregator
//! speaks to a backend ([`Protocol`]), that authenticates the way kube-aggregator does: a front-proxy client certificate (CN `front-proxy-client`, issued by the control
//! plane's front-proxy CA) plus `X-Remote-User` / `X-Remote-Group`. The server then asks the
//! control plane for a SubjectAccessReview (cached), as in a real cluster.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::task::JoinHandle;

/// The user and group the requests are made as (`system:masters` is allowed everything by
/// the control plane's SubjectAccessReview policy).
pub const USER: &str = "scale-harness";
/// The group of [`USER`].
pub const GROUP: &str = "system:masters";

/// What the client speaks (`--protocol`, named as [`super::parse_choice`] reads it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// HTTP/1.1: one request at a time per connection, as kubectl through a proxy or a
    /// client that turned h2 off asks.
    #[default]
    Http1,
    /// h2, as kube-apiserver's aggregator speaks to an APIService's backend: pooled
    /// connections that multiplex every request, with Go's `http2.Transport` windows (4 MiB
    /// per stream, 1 GiB per connection) and its 1 MiB `SETTINGS_MAX_FRAME_SIZE`.
    H2,
}

/// Go's `http2.Transport`: `transportDefaultStreamFlow`.
const GO_STREAM_WINDOW: u32 = 4 << 20;
/// Go's `http2.Transport`: `transportDefaultConnFlow`.
const GO_CONN_WINDOW: u32 = 1 << 30;
/// Go's `http2.Transport`: `defaultMaxReadFrameSize`, advertised in its first SETTINGS.
const GO_MAX_READ_FRAME: u32 = 1 << 20;

/// A connection's request side.
enum Sender {
    Http1(http1::SendRequest<Empty<Bytes>>),
    H2(http2::SendRequest<Empty<Bytes>>),
}

impl Sender {
    async fn send(
        &mut self,
        req: Request<Empty<Bytes>>,
    ) -> hyper::Result<http::Response<hyper::body::Incoming>> {
        match self {
            Sender::Http1(sender) => sender.send_request(req).await,
            Sender::H2(sender) => sender.send_request(req).await,
        }
    }
}

/// One kept-alive connection over TLS, reconnected when it breaks: HTTP/1.1 or h2
/// ([`Protocol`]); an h2 one can be shared by several clients ([`Client::share`]).
pub struct Client {
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    protocol: Protocol,
    /// The request side, and the task driving the connection when this client made it.
    conn: Option<(Sender, Option<JoinHandle<()>>)>,
}

/// A response, drained.
#[derive(Clone, Copy, Debug)]
pub struct Fetched {
    /// Status code.
    pub status: StatusCode,
    /// Body bytes on the wire.
    pub bytes: usize,
    /// Body bytes after gunzip (the same as `bytes` for an identity answer).
    pub decoded_bytes: usize,
    /// The answer was `Content-Encoding: gzip`.
    pub gzip: bool,
    /// Occurrences of the counted marker in the body; for a protobuf answer (when a marker
    /// was given), the items of the list instead.
    pub marker_count: usize,
    /// From sending the request to the response head.
    pub first_byte: Duration,
    /// From sending the request to the last body byte.
    pub total: Duration,
}

impl Client {
    /// An HTTP/1.1 client for the server at `addr` (its serving certificate is self-signed
    /// and not verified, as `insecureSkipTLSVerify` APIServices do) with this front-proxy
    /// identity.
    pub fn new(addr: SocketAddr, front_proxy: &tls::Identity) -> anyhow::Result<Client> {
        Client::speaking(addr, front_proxy, Protocol::Http1)
    }

    /// [`Client::new`] speaking `protocol` (offered alone in ALPN).
    pub fn speaking(
        addr: SocketAddr,
        front_proxy: &tls::Identity,
        protocol: Protocol,
    ) -> anyhow::Result<Client> {
        let mut config = tls::client::config(&tls::client::Verify::Insecure, Some(front_proxy))?;
        config.alpn_protocols = vec![match protocol {
            Protocol::Http1 => b"http/1.1".to_vec(),
            Protocol::H2 => b"h2".to_vec(),
        }];
        Ok(Client {
            addr,
            config: Arc::new(config),
            protocol,
            conn: None,
        })
    }

    /// An h2 client whose requests are other streams of this one's connection (made now if
    /// there is none), as the aggregator multiplexes every request to a backend over one.
    /// HTTP/1.1 has no such sharing.
    pub async fn share(&mut self) -> anyhow::Result<Client> {
        let Sender::H2(sender) = self.ready().await? else {
            anyhow::bail!("only an h2 connection is shared");
        };
        let sender = Sender::H2(sender.clone());
        Ok(Client {
            addr: self.addr,
            config: self.config.clone(),
            protocol: self.protocol,
            conn: Some((sender, None)),
        })
    }

    async fn connect(&self) -> anyhow::Result<(Sender, Option<JoinHandle<()>>)> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_nodelay(true)?;
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1")?;
        let tls = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
            .context("TLS handshake with the server")?;
        let io = TokioIo::new(tls);
        let (sender, driver) = match self.protocol {
            Protocol::Http1 => {
                let (sender, conn) = http1::handshake(io).await?;
                let driver = tokio::spawn(async move {
                    let _ = conn.await;
                });
                (Sender::Http1(sender), driver)
            }
            Protocol::H2 => {
                let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                    .initial_stream_window_size(GO_STREAM_WINDOW)
                    .initial_connection_window_size(GO_CONN_WINDOW)
                    .max_frame_size(GO_MAX_READ_FRAME)
                    .handshake(io)
                    .await?;
                let driver = tokio::spawn(async move {
                    let _ = conn.await;
                });
                (Sender::H2(sender), driver)
            }
        };
        Ok((sender, Some(driver)))
    }

    /// The connection's request side, ready for a request; reconnects when it broke.
    async fn ready(&mut self) -> anyhow::Result<&mut Sender> {
        let ready = match &mut self.conn {
            Some((Sender::Http1(sender), _)) => sender.ready().await.is_ok(),
            Some((Sender::H2(sender), _)) => sender.ready().await.is_ok(),
            None => false,
        };
        if !ready {
            if let Some((_, Some(driver))) = self.conn.take() {
                driver.abort();
            }
            self.conn = Some(self.connect().await?);
        }
        match &mut self.conn {
            Some((sender, _)) => Ok(sender),
            None => anyhow::bail!("no connection"),
        }
    }

    /// A GET of `path` as the aggregator sends it: HTTP/1.1 with a `Host`, h2 with an
    /// absolute URI (its scheme and authority become pseudo-headers); the front proxy's user.
    fn request(&self, path: &str) -> http::request::Builder {
        let req = match self.protocol {
            Protocol::Http1 => Request::get(path).header("host", "127.0.0.1"),
            Protocol::H2 => Request::get(format!("https://127.0.0.1{path}")),
        };
        req.header("x-remote-user", USER)
            .header("x-remote-group", GROUP)
    }

    /// GETs `path` and drains the body, counting `marker` (across frame boundaries).
    pub async fn get(&mut self, path: &str, marker: &[u8]) -> anyhow::Result<Fetched> {
        self.get_encoded(path, marker, false).await
    }

    /// [`Client::get`], with `Accept-Encoding: gzip` when `gzip` (as client-go asks); a gzip
    /// body is gunzipped as it arrives and the marker counted in the plain text.
    pub async fn get_encoded(
        &mut self,
        path: &str,
        marker: &[u8],
        gzip: bool,
    ) -> anyhow::Result<Fetched> {
        self.get_accepting(path, "application/json", marker, gzip)
            .await
    }

    /// [`Client::get_encoded`] with this `Accept` (e.g. the HPA's
    /// `application/vnd.kubernetes.protobuf, */*`).
    pub async fn get_accepting(
        &mut self,
        path: &str,
        accept: &str,
        marker: &[u8],
        gzip: bool,
    ) -> anyhow::Result<Fetched> {
        let mut req = self.request(path).header("accept", accept);
        if gzip {
            req = req.header("accept-encoding", "gzip");
        }
        let req = req.body(Empty::new())?;
        let sender = self.ready().await?;
        let start = Instant::now();
        let resp = sender.send(req).await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                self.conn = None;
                return Err(e).context("sending the request");
            }
        };
        let first_byte = start.elapsed();
        let status = resp.status();
        let encoded = resp
            .headers()
            .get(http::header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes() == b"gzip");
        // A protobuf list's items are counted by walking the message, so it is kept whole
        // (in this process, not the server's).
        let mut proto = (!marker.is_empty()
            && resp
                .headers()
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|v| {
                    v.as_bytes()
                        .starts_with(b"application/vnd.kubernetes.protobuf")
                }))
        .then(Vec::new);
        let mut body = resp.into_body();
        let mut counter = Counter::new(marker);
        let mut gunzip = encoded.then(|| flate2::write::GzDecoder::new(Vec::new()));
        let (mut bytes, mut decoded_bytes) = (0, 0);
        while let Some(frame) = body.frame().await {
            let frame = frame.context("reading the body")?;
            if let Ok(data) = frame.into_data() {
                bytes += data.len();
                match &mut gunzip {
                    Some(decoder) => {
                        decoder.write_all(&data).context("gunzip")?;
                        let plain = std::mem::take(decoder.get_mut());
                        decoded_bytes += plain.len();
                        counter.feed(&plain);
                    }
                    None => {
                        decoded_bytes += data.len();
                        match &mut proto {
                            Some(whole) => whole.extend_from_slice(&data),
                            None => counter.feed(&data),
                        }
                    }
                }
            }
        }
        if let Some(decoder) = gunzip {
            let plain = decoder.finish().context("gunzip")?;
            decoded_bytes += plain.len();
            counter.feed(&plain);
        }
        if let Some(whole) = &proto {
            counter.count = proto_list_items(whole).context("walking the protobuf list")?;
        }
        Ok(Fetched {
            status,
            bytes,
            decoded_bytes,
            gzip: encoded,
            marker_count: counter.count,
            first_byte,
            total: start.elapsed(),
        })
    }

    /// GETs `path` and returns the body as text.
    pub async fn text(&mut self, path: &str) -> anyhow::Result<(StatusCode, String)> {
        let (mut sender, driver) = self.connect().await?;
        let req = self.request(path).body(Empty::new())?;
        let resp = sender.send(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        if let Some(driver) = driver {
            driver.abort();
        }
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// The items of a protobuf list answer: the `k8s\0` envelope's `runtime.Unknown`, its `raw`
/// (field 2), and in that list message the occurrences of `items` (field 2).
fn proto_list_items(body: &[u8]) -> anyhow::Result<usize> {
    let unknown = body.strip_prefix(b"k8s\0").context("no k8s\\0 magic")?;
    let raw = proto_fields(unknown)?
        .into_iter()
        .find_map(|(field, value)| (field == 2).then_some(value))
        .context("no raw object in the envelope")?;
    Ok(proto_fields(raw)?
        .into_iter()
        .filter(|(field, _)| *field == 2)
        .count())
}

/// The fields of one protobuf message: number and, for length-delimited ones, the bytes
/// (other wire types are skipped and given empty).
fn proto_fields(mut message: &[u8]) -> anyhow::Result<Vec<(u64, &[u8])>> {
    fn varint(buf: &mut &[u8]) -> anyhow::Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = buf.split_first().context("truncated varint")?;
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        anyhow::bail!("varint too long")
    }
    let mut fields = Vec::new();
    while !message.is_empty() {
        let key = varint(&mut message)?;
        let value: &[u8] = match key & 7 {
            0 => {
                varint(&mut message)?;
                &[]
            }
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                message = message.get(width..).context("truncated fixed field")?;
                &[]
            }
            2 => {
                let len = usize::try_from(varint(&mut message)?)?;
                let (value, rest) = message
                    .split_at_checked(len)
                    .context("truncated length-delimited field")?;
                message = rest;
                value
            }
            other => anyhow::bail!("wire type {other}"),
        };
        fields.push((key >> 3, value));
    }
    Ok(fields)
}

/// Counts non-overlapping occurrences of a marker in a stream of chunks.
struct Counter<'a> {
    marker: &'a [u8],
    /// The last `marker.len() - 1` bytes seen, for matches across chunks.
    tail: Vec<u8>,
    count: usize,
}

impl<'a> Counter<'a> {
    fn new(marker: &'a [u8]) -> Self {
        Counter {
            marker,
            tail: Vec::new(),
            count: 0,
        }
    }

    fn feed(&mut self, chunk: &[u8]) {
        let m = self.marker.len();
        if m == 0 {
            return;
        }
        // Matches that straddle the previous chunk and this one.
        let mut joined = std::mem::take(&mut self.tail);
        let head = &chunk[..chunk.len().min(m - 1)];
        joined.extend_from_slice(head);
        self.count += count(&joined, self.marker);
        self.count += count(chunk, self.marker);
        let keep = chunk.len().min(m - 1);
        if keep == chunk.len() {
            // A short chunk: keep whatever of the old tail still fits.
            let start = joined.len().saturating_sub(m - 1);
            self.tail = joined[start..].to_vec();
        } else {
            self.tail = chunk[chunk.len() - keep..].to_vec();
        }
    }
}

/// Non-overlapping occurrences of `needle` (memchr's SIMD search: the harness's client shares
/// the machine with the server, so the CPU it spends reading a 50 MB list is the server's
/// loss).
fn count(haystack: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() {
        return 0;
    }
    memchr::memmem::find_iter(haystack, needle).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn field(number: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(value.len()).unwrap()];
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn a_protobuf_lists_items_are_counted_in_its_envelope() {
        // PodMetricsList { metadata, items x3 }, with a varint field in an item.
        let mut list = field(1, &field(2, b"12345"));
        for name in [&b"a"[..], b"bb", b"ccc"] {
            let mut item = field(1, &field(1, name));
            item.extend_from_slice(&[0x18, 0x96, 0x01]);
            list.extend(field(2, &item));
        }
        let mut unknown = field(1, &field(1, b"metrics.k8s.io/v1"));
        unknown.extend(field(2, &list));
        unknown.extend(field(4, b""));
        let body = [&b"k8s\0"[..], &unknown].concat();
        assert_eq!(proto_list_items(&body).unwrap(), 3);
        // An empty list, a truncated one, and no envelope are told apart.
        let empty = [&b"k8s\0"[..], &field(2, &field(1, b""))].concat();
        assert_eq!(proto_list_items(&empty).unwrap(), 0);
        assert!(proto_list_items(&body[..body.len() - 4]).is_err());
        assert!(proto_list_items(&unknown).is_err());
    }

    #[test]
    fn markers_are_counted_across_chunk_boundaries() {
        let text = b"{\"window\":\"15s\"},{\"window\":\"15s\"},{\"window\":\"20s\"}";
        for split in 1..text.len() {
            let mut c = Counter::new(b"\"window\":");
            let (a, b) = text.split_at(split);
            c.feed(a);
            c.feed(b);
            assert_eq!(c.count, 3, "split at {split}");
        }
        let mut c = Counter::new(b"\"window\":");
        for byte in text {
            c.feed(std::slice::from_ref(byte));
        }
        assert_eq!(c.count, 3);
    }
}
