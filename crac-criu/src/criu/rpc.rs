//! The few fields of CRIU's RPC (`images/rpc.proto`, protobuf v2) the engine uses, encoded and
//! decoded by hand: a request is a handful of varints and strings, a response a few more.

/// `criu_req_type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqType {
    /// `DUMP = 1`
    Dump = 1,
}

/// The options of a DUMP request (`criu_opts`), only what the engine sets.
#[derive(Debug, Clone, Default)]
pub struct DumpOpts {
    /// `images_dir_fd = 1`: an fd *in the requesting process*; criu opens it via /proc.
    pub images_dir_fd: i32,
    /// `leave_running = 3`
    pub leave_running: bool,
    /// `tcp_established = 5`
    pub tcp_established: bool,
    /// `shell_job = 7`
    pub shell_job: bool,
    /// `file_locks = 8`
    pub file_locks: bool,
    /// `log_level = 9`
    pub log_level: i32,
    /// `log_file = 10`, relative to the image directory.
    pub log_file: String,
    /// `external = 37`, e.g. `unix[12345]`.
    pub external: Vec<String>,
    /// `tcp_close = 52`
    pub tcp_close: bool,
    /// `unprivileged = 67`: CRIU's non-root mode (its capabilities are its own).
    pub unprivileged: bool,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn put_int(out: &mut Vec<u8>, field: u32, v: i64) {
    key(out, field, 0);
    // Negative int32 values are sign-extended to 64 bits on the wire.
    varint(out, v as u64);
}

fn put_bool(out: &mut Vec<u8>, field: u32, v: bool) {
    put_int(out, field, i64::from(v));
}

fn put_bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    key(out, field, 2);
    varint(out, v.len() as u64);
    out.extend_from_slice(v);
}

impl DumpOpts {
    fn encode(&self) -> Vec<u8> {
        let mut o = Vec::new();
        put_int(&mut o, 1, i64::from(self.images_dir_fd));
        put_bool(&mut o, 3, self.leave_running);
        put_bool(&mut o, 5, self.tcp_established);
        put_bool(&mut o, 7, self.shell_job);
        put_bool(&mut o, 8, self.file_locks);
        put_int(&mut o, 9, i64::from(self.log_level));
        put_bytes(&mut o, 10, self.log_file.as_bytes());
        for e in &self.external {
            put_bytes(&mut o, 37, e.as_bytes());
        }
        if self.tcp_close {
            put_bool(&mut o, 52, true);
        }
        if self.unprivileged {
            put_bool(&mut o, 67, true);
        }
        o
    }
}

/// Encodes a `criu_req` of `ty` with optional dump options.
pub fn encode_request(ty: ReqType, opts: Option<&DumpOpts>) -> Vec<u8> {
    let mut o = Vec::new();
    put_int(&mut o, 1, ty as i64);
    if let Some(opts) = opts {
        put_bytes(&mut o, 2, &opts.encode());
    }
    o
}

/// The fields of `criu_resp` the engine reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    /// `type = 1`
    pub ty: u64,
    /// `success = 2`
    pub success: bool,
    /// `dump.restored` (`dump = 3`, `criu_dump_resp.restored = 1`)
    pub restored: bool,
    /// `cr_errno = 7`
    pub cr_errno: Option<i32>,
    /// `cr_errmsg = 9`
    pub cr_errmsg: Option<String>,
    /// `version = 10`: (major, minor, sublevel)
    pub version: Option<(i64, i64, i64)>,
}

/// A protobuf decoding failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed criu RPC response: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// A protobuf field's value: a varint or fixed integer, or a length-delimited byte string.
pub enum Value<'a> {
    /// A varint or fixed-width integer.
    Int(u64),
    /// A length-delimited byte string.
    Bytes(&'a [u8]),
}

/// Reads protobuf fields one by one, bounds-checked (also what CRIU's image files hold).
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of the message `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// The next varint.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or(DecodeError("truncated varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint too long"))
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next field (number and value), `None` at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let k = self.varint()?;
        let field = (k >> 3) as u32;
        let v = match k & 7 {
            0 => Value::Int(self.varint()?),
            2 => {
                let len = self.varint()? as usize;
                if len > self.buf.len() {
                    return Err(DecodeError("length past end"));
                }
                let (b, rest) = self.buf.split_at(len);
                self.buf = rest;
                Value::Bytes(b)
            }
            1 => {
                let b = self.buf.get(..8).ok_or(DecodeError("truncated fixed64"))?;
                self.buf = &self.buf[8..];
                Value::Int(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            5 => {
                let b = self.buf.get(..4).ok_or(DecodeError("truncated fixed32"))?;
                self.buf = &self.buf[4..];
                Value::Int(u64::from(u32::from_le_bytes(
                    b.try_into().expect("4 bytes"),
                )))
            }
            _ => return Err(DecodeError("unknown wire type")),
        };
        Ok(Some((field, v)))
    }
}

/// Decodes a `criu_resp`, ignoring fields the engine does not use.
pub fn decode_response(buf: &[u8]) -> Result<Response, DecodeError> {
    let mut r = Reader { buf };
    let mut resp = Response::default();
    while let Some((field, v)) = r.next_field()? {
        match (field, v) {
            (1, Value::Int(t)) => resp.ty = t,
            (2, Value::Int(s)) => resp.success = s != 0,
            (3, Value::Bytes(b)) => {
                let mut d = Reader { buf: b };
                while let Some((f, v)) = d.next_field()? {
                    if let (1, Value::Int(x)) = (f, v) {
                        resp.restored = x != 0;
                    }
                }
            }
            (7, Value::Int(e)) => resp.cr_errno = Some(e as i32),
            (9, Value::Bytes(b)) => resp.cr_errmsg = Some(String::from_utf8_lossy(b).into_owned()),
            (10, Value::Bytes(b)) => {
                let mut d = Reader { buf: b };
                let (mut maj, mut min, mut sub) = (0, 0, 0);
                while let Some((f, v)) = d.next_field()? {
                    match (f, v) {
                        (1, Value::Int(x)) => maj = x as i64,
                        (2, Value::Int(x)) => min = x as i64,
                        (4, Value::Int(x)) => sub = x as i64,
                        _ => {}
                    }
                }
                resp.version = Some((maj, min, sub));
            }
            _ => {}
        }
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_encoding_matches_protobuf() {
        // type=DUMP(1), opts{images_dir_fd=5, ...}
        let opts = DumpOpts {
            images_dir_fd: 5,
            shell_job: true,
            log_level: 4,
            log_file: "d.log".into(),
            ..DumpOpts::default()
        };
        let req = encode_request(ReqType::Dump, Some(&opts));
        assert_eq!(&req[..2], &[0x08, 0x01]);
        assert_eq!(req[2], 0x12); // field 2, length-delimited
        let inner = &req[4..];
        assert_eq!(inner.len(), req[3] as usize);
        assert_eq!(&inner[..2], &[0x08, 0x05]);
        assert!(inner.windows(2).any(|w| w == [0x38, 0x01])); // shell_job = 7
        assert!(inner.ends_with(&[0x52, 5, b'd', b'.', b'l', b'o', b'g']));
    }

    #[test]
    fn negative_ints_are_ten_bytes() {
        let mut o = Vec::new();
        put_int(&mut o, 1, -1);
        assert_eq!(o.len(), 11);
    }

    #[test]
    fn response_decoding() {
        // type=1, success=1, dump{restored=1}, cr_errmsg="x"
        let buf = [
            0x08, 0x01, 0x10, 0x01, 0x1a, 0x02, 0x08, 0x01, 0x4a, 0x01, b'x',
        ];
        let r = decode_response(&buf).unwrap();
        assert!(r.success && r.restored);
        assert_eq!(r.cr_errmsg.as_deref(), Some("x"));
        assert!(decode_response(&[0x08]).is_err());
    }
}
