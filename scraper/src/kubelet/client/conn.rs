//! One kubelet connection: a TCP stream and, over HTTPS, rustls' unbuffered client state,
//! and the pool of idle ones.
//!
//! A connection owns no buffers: the ciphertext read from the socket, the records written to
//! it and the plaintext read from it live in a [`Scratch`] that a request borrows from a
//! small shared stock while it runs, and gives back while it waits for the kubelet's answer
//! ([`ScratchGuard::lend_while`]). A kept-alive connection between scrapes is only the
//! socket and the TLS session state (keys, the handshake's outcome), a few KiB.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Initial (and usual) size of the ciphertext buffer of a request: two TLS records of the
/// largest size, so a body arrives in few reads.
const TLS_IN_BYTES: usize = 2 * (16 * 1024 + 2048 + 5);

/// Largest ciphertext buffer: a handshake message is joined in it, and may be up to 64 KiB.
const TLS_IN_MAX_BYTES: usize = 128 * 1024;

/// Initial size of the buffer TLS records are written from (a request, a ClientHello).
const TLS_OUT_BYTES: usize = 4 * 1024;

/// Each read from a plain-HTTP connection asks for this much.
const PLAIN_READ_BYTES: usize = 16 * 1024;

/// Scratch buffers kept for the next requests; requests beyond that many at once (writing,
/// reading or connecting: waiting for an answer holds none) get fresh ones, freed when they
/// finish.
pub(super) const SPARE_SCRATCH: usize = 8;

/// A plaintext buffer that grew beyond this is not kept in the stock.
const PLAIN_KEEP_BYTES: usize = 64 * 1024;

/// How long TCP waits on an idle connection before probing the peer (hyper's connector
/// setting before this client: `set_keepalive(30 s)`).
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// A failure of the transport under HTTP.
#[derive(Debug)]
pub(super) enum IoFailure {
    /// The socket failed.
    Io(io::Error),
    /// TLS failed (a bad record, an alert from the peer, a certificate).
    Tls(rustls::Error),
}

impl From<io::Error> for IoFailure {
    fn from(e: io::Error) -> Self {
        IoFailure::Io(e)
    }
}

/// A failure to open a connection.
#[derive(Debug)]
pub(super) enum ConnectFailure {
    /// TCP (or the name lookup) failed.
    Io(io::Error),
    /// The TLS handshake failed.
    Tls(rustls::Error),
}

/// A connection to one kubelet.
pub(super) struct Conn {
    tcp: TcpStream,
    /// Boxed: ~1 KiB inline, which would otherwise sit in every pool slot and in the future
    /// of every request.
    tls: Option<Box<UnbufferedClientConnection>>,
}

/// What a read gave.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Read {
    /// Some plaintext was appended.
    Data,
    /// The peer closed the connection (cleanly or not); nothing was appended.
    Eof,
}

/// The buffers of one request in flight.
pub(super) struct Scratch {
    /// Ciphertext read from the socket; `tls_in[..used]` is not processed yet. Its length is
    /// its capacity (rustls works on initialized slices).
    tls_in: Vec<u8>,
    used: usize,
    /// TLS records to write; `tls_out[..out_used]` are pending.
    tls_out: Vec<u8>,
    out_used: usize,
    /// The request being written.
    pub(super) request: Vec<u8>,
    /// Plaintext read: the response head, chunked input.
    pub(super) plain: Vec<u8>,
}

impl Scratch {
    /// One with nothing allocated (a placeholder).
    fn empty() -> Self {
        Scratch {
            tls_in: Vec::new(),
            used: 0,
            tls_out: Vec::new(),
            out_used: 0,
            request: Vec::new(),
            plain: Vec::new(),
        }
    }

    fn new() -> Self {
        Scratch {
            tls_in: vec![0; TLS_IN_BYTES],
            used: 0,
            tls_out: vec![0; TLS_OUT_BYTES],
            out_used: 0,
            request: Vec::new(),
            plain: Vec::new(),
        }
    }

    /// Forgets any TLS bytes of a connection given up on.
    pub(super) fn reset(&mut self) {
        self.used = 0;
        self.out_used = 0;
    }

    /// Whether ciphertext is left over that was not processed (after a response: bytes the
    /// kubelet should not have sent, so the connection is not reused).
    pub(super) fn leftover(&self) -> bool {
        self.used > 0
    }
}

/// The stock of spare [`Scratch`]es.
#[derive(Default)]
pub(super) struct Scratches {
    spare: Mutex<Vec<Scratch>>,
    /// How many were ever made (the stock was empty), for the tests.
    #[cfg(test)]
    made: AtomicUsize,
}

impl Scratches {
    /// A scratch for one request, given back when the guard drops.
    pub(super) fn take(&self) -> ScratchGuard<'_> {
        ScratchGuard {
            stock: self,
            scratch: self.pop(),
        }
    }

    fn pop(&self) -> Scratch {
        self.spare.lock().pop().unwrap_or_else(|| {
            #[cfg(test)]
            self.made.fetch_add(1, Ordering::Relaxed);
            Scratch::new()
        })
    }

    /// How many scratches were ever made.
    #[cfg(test)]
    pub(super) fn made(&self) -> usize {
        self.made.load(Ordering::Relaxed)
    }
}

/// A borrowed [`Scratch`].
pub(super) struct ScratchGuard<'a> {
    stock: &'a Scratches,
    scratch: Scratch,
}

impl std::ops::Deref for ScratchGuard<'_> {
    type Target = Scratch;
    fn deref(&self) -> &Scratch {
        &self.scratch
    }
}

impl std::ops::DerefMut for ScratchGuard<'_> {
    fn deref_mut(&mut self) -> &mut Scratch {
        &mut self.scratch
    }
}

impl ScratchGuard<'_> {
    /// Waits for `ready` without holding buffers when none of them holds anything (a request
    /// written, its answer not yet begun): they go back to the stock meanwhile and a set is
    /// taken again when `ready` resolves. A slice's requests all wait for their kubelets at
    /// once, but their answers are read a few at a time, so a small stock serves them all
    /// instead of a new set being allocated and zeroed for most of them.
    pub(super) async fn lend_while<F: Future>(&mut self, ready: F) -> F::Output {
        if self.scratch.used != 0 || self.scratch.out_used != 0 {
            return ready.await;
        }
        self.give_back();
        let output = ready.await;
        self.scratch = self.stock.pop();
        output
    }

    /// Puts the scratch (when it is one worth keeping) back in the stock, leaving an empty
    /// placeholder.
    fn give_back(&mut self) {
        let mut scratch = std::mem::replace(&mut self.scratch, Scratch::empty());
        if scratch.tls_in.len() != TLS_IN_BYTES || scratch.plain.capacity() > PLAIN_KEEP_BYTES {
            return;
        }
        scratch.reset();
        scratch.request.clear();
        scratch.plain.clear();
        let mut stock = self.stock.spare.lock();
        if stock.len() < SPARE_SCRATCH {
            stock.push(scratch);
        }
    }
}

impl Drop for ScratchGuard<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Opens a TCP connection to `host:port` (each resolved address in turn) and, when `tls` is
/// given, makes the TLS handshake with `host` as the server name.
pub(super) async fn connect(
    host: &str,
    port: u16,
    tls: Option<&Arc<rustls::ClientConfig>>,
    scratch: &mut Scratch,
) -> Result<Conn, ConnectFailure> {
    let mut last = None;
    let mut tcp = None;
    for addr in tokio::net::lookup_host((host, port))
        .await
        .map_err(ConnectFailure::Io)?
    {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                tcp = Some(stream);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some(tcp) = tcp else {
        return Err(ConnectFailure::Io(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no address resolved")
        })));
    };
    tcp.set_nodelay(true).map_err(ConnectFailure::Io)?;
    socket2::SockRef::from(&tcp)
        .set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE))
        .map_err(ConnectFailure::Io)?;
    let Some(config) = tls else {
        return Ok(Conn { tcp, tls: None });
    };
    let name = ServerName::try_from(host.to_owned()).map_err(|_| {
        ConnectFailure::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            "invalid dnsname",
        ))
    })?;
    let tls =
        UnbufferedClientConnection::new(Arc::clone(config), name).map_err(ConnectFailure::Tls)?;
    let mut conn = Conn {
        tcp,
        tls: Some(Box::new(tls)),
    };
    conn.handshake(scratch).await?;
    Ok(conn)
}

/// Grows `buf` (an initialized buffer) so that it holds at least `size` bytes.
fn grow(buf: &mut Vec<u8>, size: usize) {
    if buf.len() < size {
        buf.resize(size, 0);
    }
}

impl Conn {
    /// Whether the idle connection still looks usable: the peer did not close it or send
    /// anything (an alert) while it was idle. Does not wait.
    pub(super) fn idle_and_open(&self) -> bool {
        let mut probe = [0u8; 64];
        match self.tcp.try_read(&mut probe) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }

    async fn handshake(&mut self, s: &mut Scratch) -> Result<(), ConnectFailure> {
        let Conn { tcp, tls } = self;
        let Some(tls) = tls.as_mut() else {
            return Ok(());
        };
        loop {
            let UnbufferedStatus { discard, state } =
                tls.process_tls_records(&mut s.tls_in[..s.used]);
            let mut read = false;
            let mut done = false;
            match state.map_err(ConnectFailure::Tls)? {
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut s.tls_out, &mut s.out_used, |out| encode.encode(out))
                        .map_err(ConnectFailure::Io)?;
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    tcp.write_all(&s.tls_out[..s.out_used])
                        .await
                        .map_err(ConnectFailure::Io)?;
                    s.out_used = 0;
                    transmit.done();
                }
                ConnectionState::WriteTraffic(_) => done = true,
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    return Err(ConnectFailure::Io(handshake_eof()));
                }
                ConnectionState::ReadTraffic(_) => {
                    return Err(ConnectFailure::Io(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "application data before the TLS handshake completed",
                    )));
                }
                _ => read = true,
            }
            s.discard(discard);
            if done {
                return Ok(());
            }
            if read && s.fill(tcp).await.map_err(ConnectFailure::Io)? == 0 {
                return Err(ConnectFailure::Io(handshake_eof()));
            }
        }
    }

    /// Writes `data` (encrypted over HTTPS).
    pub(super) async fn write(&mut self, data: &[u8], s: &mut Scratch) -> Result<(), IoFailure> {
        let Conn { tcp, tls } = self;
        let Some(tls) = tls.as_mut() else {
            tcp.write_all(data).await?;
            return Ok(());
        };
        loop {
            let UnbufferedStatus { discard, state } =
                tls.process_tls_records(&mut s.tls_in[..s.used]);
            let mut written = false;
            match state.map_err(IoFailure::Tls)? {
                ConnectionState::WriteTraffic(mut traffic) => {
                    encode_into(&mut s.tls_out, &mut s.out_used, |out| {
                        traffic.encrypt(data, out).map_err(|e| match e {
                            EncryptError::InsufficientSize(size) => {
                                EncodeError::InsufficientSize(size)
                            }
                            // The sequence numbers ran out (2^64 records): not going to happen.
                            _ => EncodeError::AlreadyEncoded,
                        })
                    })?;
                    tcp.write_all(&s.tls_out[..s.out_used]).await?;
                    s.out_used = 0;
                    written = true;
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut s.tls_out, &mut s.out_used, |out| encode.encode(out))?;
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    tcp.write_all(&s.tls_out[..s.out_used]).await?;
                    s.out_used = 0;
                    transmit.done();
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    return Err(IoFailure::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                _ => {
                    return Err(IoFailure::Io(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "unexpected TLS state before the request",
                    )));
                }
            }
            s.discard(discard);
            if written {
                return Ok(());
            }
        }
    }

    /// Resolves when the connection has something to read (or is closed); reads nothing.
    pub(super) async fn readable(&self) -> io::Result<()> {
        self.tcp.readable().await
    }

    /// Reads what arrives next and appends its plaintext to `out` (waiting for at least one
    /// byte). Over HTTPS every complete record already received is decrypted at once.
    pub(super) async fn read(
        &mut self,
        out: &mut Vec<u8>,
        s: &mut Scratch,
    ) -> Result<Read, IoFailure> {
        let Conn { tcp, tls } = self;
        let Some(tls) = tls.as_mut() else {
            if out.capacity() == out.len() {
                out.reserve(PLAIN_READ_BYTES);
            }
            return Ok(if tcp.read_buf(out).await? == 0 {
                Read::Eof
            } else {
                Read::Data
            });
        };
        let mut got = false;
        loop {
            let UnbufferedStatus { discard, state } =
                tls.process_tls_records(&mut s.tls_in[..s.used]);
            let mut read = false;
            let mut closed = false;
            match state.map_err(IoFailure::Tls)? {
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        let record = record.map_err(IoFailure::Tls)?;
                        out.extend_from_slice(record.payload);
                        got = true;
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut s.tls_out, &mut s.out_used, |out| encode.encode(out))?;
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    tcp.write_all(&s.tls_out[..s.out_used]).await?;
                    s.out_used = 0;
                    transmit.done();
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => closed = true,
                _ => read = true,
            }
            s.discard(discard);
            if closed {
                return Ok(if got { Read::Data } else { Read::Eof });
            }
            if read {
                if got {
                    return Ok(Read::Data);
                }
                if s.fill(tcp).await? == 0 {
                    // A TCP close without close_notify: an EOF all the same (the framing
                    // says whether the response was complete).
                    return Ok(Read::Eof);
                }
            }
        }
    }
}

impl Scratch {
    /// Drops `discard` processed bytes from the front of the ciphertext buffer.
    fn discard(&mut self, discard: usize) {
        if discard > 0 {
            self.tls_in.copy_within(discard..self.used, 0);
            self.used -= discard;
        }
    }

    /// Reads ciphertext from `tcp` after what is buffered, growing the buffer when it is
    /// full (a large handshake message); 0 at EOF.
    async fn fill(&mut self, tcp: &mut TcpStream) -> io::Result<usize> {
        if self.used == self.tls_in.len() {
            if self.tls_in.len() >= TLS_IN_MAX_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "TLS message larger than the buffer limit",
                ));
            }
            let size = (self.tls_in.len() * 2).min(TLS_IN_MAX_BYTES);
            grow(&mut self.tls_in, size);
        }
        let n = tcp.read(&mut self.tls_in[self.used..]).await?;
        self.used += n;
        Ok(n)
    }
}

/// Runs `encode` on the free part of `buf` (after `used`), growing it as asked.
fn encode_into(
    buf: &mut Vec<u8>,
    used: &mut usize,
    mut encode: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>,
) -> io::Result<()> {
    loop {
        match encode(&mut buf[*used..]) {
            Ok(n) => {
                *used += n;
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(size)) => {
                let needed = *used + size.required_size;
                grow(buf, needed);
            }
            Err(EncodeError::AlreadyEncoded) => {
                return Err(io::Error::other("TLS record could not be encoded"));
            }
        }
    }
}

fn handshake_eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof")
}

/// One idle connection, and since when.
struct Idle {
    conn: Conn,
    since: Instant,
}

/// Idle kept-alive connections, at most one per `host:port`, each for at most `timeout`.
pub(super) struct Pool {
    /// The TLS config of this pool's connections (`None` only for a plain-HTTP client).
    pub(super) tls: Option<Arc<rustls::ClientConfig>>,
    idle: Mutex<IdleSet>,
    timeout: Duration,
    max: usize,
}

#[derive(Default)]
struct IdleSet {
    by_authority: HashMap<Box<str>, Idle, foldhash::fast::RandomState>,
    swept: Option<Instant>,
}

impl Pool {
    pub(super) fn new(
        tls: Option<Arc<rustls::ClientConfig>>,
        timeout: Duration,
        max: usize,
    ) -> Self {
        Pool {
            tls,
            idle: Mutex::new(IdleSet::default()),
            timeout,
            max,
        }
    }

    /// The idle connection to `authority`, if there is one that is still fresh and open.
    pub(super) fn checkout(&self, authority: &str) -> Option<Conn> {
        let idle = self.idle.lock().by_authority.remove(authority)?;
        (idle.since.elapsed() < self.timeout && idle.conn.idle_and_open()).then_some(idle.conn)
    }

    /// Keeps `conn` for the next request to `authority` (replacing an older one), unless the
    /// pool is full. Connections idle for longer than the timeout are closed on the way, at
    /// most once per tenth of it.
    pub(super) fn checkin(&self, authority: &str, conn: Conn) {
        let now = Instant::now();
        let mut expired = Vec::new();
        let replaced;
        {
            let mut idle = self.idle.lock();
            if idle
                .swept
                .is_none_or(|at| now.duration_since(at) >= self.timeout / 10)
            {
                idle.swept = Some(now);
                let timeout = self.timeout;
                expired.extend(
                    idle.by_authority
                        .extract_if(|_, i| now.duration_since(i.since) >= timeout)
                        .map(|(_, i)| i),
                );
            }
            if idle.by_authority.len() >= self.max && !idle.by_authority.contains_key(authority) {
                return;
            }
            replaced = idle
                .by_authority
                .insert(authority.into(), Idle { conn, since: now });
        }
        drop(expired);
        drop(replaced);
    }

    /// Idle connections held.
    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.idle.lock().by_authority.len()
    }
}
