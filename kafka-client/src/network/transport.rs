//! The bytes under a connection: plain TCP, or TLS over it (rustls).
//!
//! A connection is set up on its helper thread with blocking calls ([`Setup`]: the TLS
//! handshake, ApiVersions, SASL), then split: the owner of the connection writes frames
//! ([`FrameWriter`]), a reader thread reads them ([`FrameReader`]). Plain TCP splits into two
//! independent handles. A TLS session is one state for both directions, so its halves share it
//! under a lock that is never held across a blocking socket call: the reader reads ciphertext
//! from the socket without it, then decrypts under it; the writer encrypts under it into its
//! own buffer, then writes that buffer holding only the socket's write lock. Neither side can
//! stall the other while the broker is slow to read or to write (the broker itself reads the
//! next request of a connection only after sending the previous response).

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use parking_lot::Mutex;
use rustls::ClientConnection;

/// A connection being set up: blocking reads and writes on the helper thread.
pub(crate) enum Setup {
    Plain(TcpStream),
    Tls(TcpStream, Box<ClientConnection>),
}

impl Setup {
    /// Runs the TLS handshake of `conn` over `sock`.
    pub fn tls(mut sock: TcpStream, mut conn: ClientConnection) -> Result<Self, io::Error> {
        while conn.is_handshaking() {
            conn.complete_io(&mut sock)?;
        }
        // The broker's first records after the handshake (session tickets) are read later.
        Ok(Self::Tls(sock, Box::new(conn)))
    }

    /// Splits into the writer (for the owner) and the reader (for the reader thread).
    pub fn split(self) -> io::Result<(FrameWriter, FrameReader)> {
        match self {
            Setup::Plain(s) => {
                let r = s.try_clone()?;
                Ok((FrameWriter::Plain(s), FrameReader::Plain(r)))
            }
            Setup::Tls(s, mut conn) => {
                // Frames are encrypted whole: a produce request is written in one piece.
                conn.set_buffer_limit(None);
                let read_sock = s.try_clone()?;
                let shared = Arc::new(Shared {
                    conn: Mutex::new(*conn),
                    sock: Mutex::new(s),
                });
                Ok((
                    FrameWriter::Tls {
                        shared: shared.clone(),
                        out: Vec::new(),
                    },
                    FrameReader::Tls(TlsReader {
                        sock: read_sock,
                        shared,
                        buf: vec![0; 32 * 1024].into_boxed_slice(),
                        start: 0,
                        end: 0,
                    }),
                ))
            }
        }
    }
}

impl Read for Setup {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Setup::Plain(s) => s.read(buf),
            Setup::Tls(s, c) => rustls::Stream::new(&mut **c, s).read(buf),
        }
    }
}

impl Write for Setup {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Setup::Plain(s) => s.write(buf),
            Setup::Tls(s, c) => rustls::Stream::new(&mut **c, s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Setup::Plain(s) => s.flush(),
            Setup::Tls(s, c) => rustls::Stream::new(&mut **c, s).flush(),
        }
    }
}

/// The TLS session and the socket's write side, shared by the two halves.
pub(crate) struct Shared {
    conn: Mutex<ClientConnection>,
    sock: Mutex<TcpStream>,
}

/// The write half of an open connection.
pub(crate) enum FrameWriter {
    Plain(TcpStream),
    Tls {
        shared: Arc<Shared>,
        /// Ciphertext of the frame being written (kept to reuse its allocation).
        out: Vec<u8>,
    },
}

impl std::fmt::Debug for FrameWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FrameWriter::Plain(_) => "FrameWriter::Plain",
            FrameWriter::Tls { .. } => "FrameWriter::Tls",
        })
    }
}

impl FrameWriter {
    /// Another handle on the same connection's write side.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            FrameWriter::Plain(s) => FrameWriter::Plain(s.try_clone()?),
            FrameWriter::Tls { shared, .. } => FrameWriter::Tls {
                shared: shared.clone(),
                out: Vec::new(),
            },
        })
    }

    /// Writes one complete frame.
    pub fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        self.write_parts(&mut [IoSlice::new(frame)])
    }

    /// Writes one complete frame given in parts (a Produce request's records are written
    /// from the batches' own buffers: no copy into a request buffer).
    pub fn write_parts(&mut self, parts: &mut [IoSlice<'_>]) -> io::Result<()> {
        match self {
            FrameWriter::Plain(s) => write_all_vectored(s, parts),
            FrameWriter::Tls { shared, out } => {
                out.clear();
                let mut conn = shared.conn.lock();
                for part in parts.iter() {
                    conn.writer().write_all(part)?;
                }
                // Lock order: the session, then the socket. The session is released before the
                // socket write blocks, so the reader goes on decrypting meanwhile.
                let mut sock = shared.sock.lock();
                while conn.wants_write() {
                    conn.write_tls(out)?;
                }
                drop(conn);
                sock.write_all(out)?;
                if out.capacity() > 4 * 1024 * 1024 {
                    *out = Vec::new(); // a rare huge frame does not pin its memory
                }
                Ok(())
            }
        }
    }
}

/// `Write::write_all_vectored`, which is not stable: writes every part, in as few calls as the
/// socket takes them.
fn write_all_vectored(w: &mut impl Write, mut parts: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut parts, 0); // past empty parts
    while !parts.is_empty() {
        match w.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The read half of an open connection, for the reader thread.
pub(crate) enum FrameReader {
    Plain(TcpStream),
    Tls(TlsReader),
}

impl Read for FrameReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            FrameReader::Plain(s) => s.read(buf),
            FrameReader::Tls(t) => t.read(buf),
        }
    }
}

/// Reads plaintext from a TLS session whose socket it reads alone.
pub(crate) struct TlsReader {
    sock: TcpStream,
    shared: Arc<Shared>,
    /// Ciphertext read from the socket and not yet given to the session: `buf[start..end]`.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Read for TlsReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut conn = self.shared.conn.lock();
                match conn.reader().read(out) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    // Only fed when no plaintext is waiting, so the session's plaintext buffer
                    // never overflows.
                    let mut pending = &self.buf[self.start..self.end];
                    let n = conn.read_tls(&mut pending)?;
                    self.start += n;
                    conn.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    if conn.wants_write() {
                        Self::answer(&mut conn, &self.shared.sock);
                    }
                    continue;
                }
            }
            // The socket is read without the session's lock: the writer goes on meanwhile.
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                return Ok(0);
            }
            self.start = 0;
            self.end = n;
        }
    }
}

impl TlsReader {
    /// The session has something to send of its own (a key update, an alert): sent if the
    /// socket is free, else it goes out with the next frame the writer sends.
    fn answer(conn: &mut ClientConnection, sock: &Mutex<TcpStream>) {
        if let Some(mut sock) = sock.try_lock() {
            let mut out = Vec::new();
            while conn.wants_write() {
                if conn.write_tls(&mut out).is_err() {
                    return;
                }
            }
            let _ = sock.write_all(&out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes at most 3 bytes per call, and sometimes none but an interruption.
    struct Trickle {
        got: Vec<u8>,
        calls: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(4) {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(3);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_frame_in_parts_is_written_whole_however_the_socket_takes_it() {
        let (a, b, c) = (*b"size", [7u8; 20], *b"tail!");
        let mut parts = [
            IoSlice::new(&[]),
            IoSlice::new(&a),
            IoSlice::new(&[]),
            IoSlice::new(&b),
            IoSlice::new(&c),
        ];
        let mut w = Trickle {
            got: Vec::new(),
            calls: 0,
        };
        write_all_vectored(&mut w, &mut parts).unwrap();
        assert_eq!(w.got, [&a[..], &b, &c].concat());
    }

    #[test]
    fn a_socket_that_takes_nothing_is_an_error_not_a_spin() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Ok(0)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let err = write_all_vectored(&mut Full, &mut [IoSlice::new(b"x")]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }
}
