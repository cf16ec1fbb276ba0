//! Kafka's primitive types: fixed-width integers, varints, (compact) strings, bytes and arrays,
//! tagged fields and UUIDs, read from an untrusted buffer and written into a `Vec<u8>`.
//!
//! Reading never panics and never allocates more than the bytes actually present: every length
//! and count is checked against what remains before anything is reserved.

use super::DecodeError;

/// A cursor over a received frame. Every read checks the remaining length first.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, starting at its first byte.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not read yet, left unread.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes, or [`DecodeError::Truncated`].
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: n,
                remaining: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Errors unless every byte was consumed (a response with trailing garbage is suspect).
    pub fn expect_end(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }

    /// A count of elements that each take at least `min_size` bytes, checked against the
    /// remaining bytes, so a forged count cannot make the caller reserve memory.
    pub fn bounded_count(&self, count: usize, min_size: usize) -> Result<usize, DecodeError> {
        if count.saturating_mul(min_size.max(1)) > self.remaining() {
            return Err(DecodeError::CountTooLarge {
                count,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }

    /// A length or count prefix: `i32` (-1 = null) or, when `compact`, unsigned varint N+1
    /// (0 = null). `None` means null.
    pub fn length(&mut self, compact: bool) -> Result<Option<usize>, DecodeError> {
        if compact {
            let n = UnsignedVarint::read(self)?.0;
            Ok(if n == 0 { None } else { Some((n - 1) as usize) })
        } else {
            let n = i32::read(self)?;
            match n {
                -1 => Ok(None),
                n if n < 0 => Err(DecodeError::NegativeLength(n as i64)),
                n => Ok(Some(n as usize)),
            }
        }
    }

    /// A string of the given encoding; null is an error.
    pub fn string(&mut self, compact: bool) -> Result<String, DecodeError> {
        self.nullable_string(compact)?
            .ok_or(DecodeError::UnexpectedNull("string"))
    }

    /// A nullable string: `i16` length or compact (unsigned varint N+1).
    pub fn nullable_string(&mut self, compact: bool) -> Result<Option<String>, DecodeError> {
        Ok(self.length_prefixed_str(compact)?.map(str::to_owned))
    }

    /// A nullable string borrowed from the frame (no copy).
    pub fn length_prefixed_str(&mut self, compact: bool) -> Result<Option<&'a str>, DecodeError> {
        let len = if compact {
            self.length(true)?
        } else {
            match i16::read(self)? {
                -1 => None,
                n if n < 0 => return Err(DecodeError::NegativeLength(n as i64)),
                n => Some(n as usize),
            }
        };
        match len {
            None => Ok(None),
            Some(n) => std::str::from_utf8(self.take(n)?)
                .map(Some)
                .map_err(|_| DecodeError::InvalidUtf8),
        }
    }

    /// Nullable bytes: `i32` length or compact.
    pub fn nullable_bytes(&mut self, compact: bool) -> Result<Option<&'a [u8]>, DecodeError> {
        match self.length(compact)? {
            None => Ok(None),
            Some(n) => self.take(n).map(Some),
        }
    }

    /// An array whose elements each take at least `min_size` bytes; null is an error.
    pub fn array_of<T>(
        &mut self,
        compact: bool,
        min_size: usize,
        mut f: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let n = self
            .length(compact)?
            .ok_or(DecodeError::UnexpectedNull("array"))?;
        let n = self.bounded_count(n, min_size)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }

    /// A nullable array: `None` for null.
    pub fn nullable_array_of<T>(
        &mut self,
        compact: bool,
        min_size: usize,
        mut f: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<Vec<T>>, DecodeError> {
        let Some(n) = self.length(compact)? else {
            return Ok(None);
        };
        let n = self.bounded_count(n, min_size)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(Some(v))
    }

    /// Tagged fields: returned as `(tag, raw bytes)` for the caller to interpret the ones it
    /// knows; unknown ones are skipped, as the protocol requires.
    pub fn tagged_fields(&mut self) -> Result<Vec<(u32, &'a [u8])>, DecodeError> {
        let n = UnsignedVarint::read(self)?.0 as usize;
        let n = self.bounded_count(n, 2)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let tag = UnsignedVarint::read(self)?.0;
            let size = UnsignedVarint::read(self)?.0 as usize;
            v.push((tag, self.take(size)?));
        }
        Ok(v)
    }

    /// Skips tagged fields when `flexible`.
    pub fn skip_tagged_fields(&mut self, flexible: bool) -> Result<(), DecodeError> {
        if flexible {
            self.tagged_fields()?;
        }
        Ok(())
    }
}

/// A value that can be read from a [`Reader`].
pub trait ReadType<'a>: Sized {
    /// Reads one value.
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError>;
}

/// A value that can be appended to an output buffer.
pub trait WriteType {
    /// Appends the encoding of `self`.
    fn write(&self, w: &mut Vec<u8>);
}

macro_rules! fixed_int {
    ($t:ty, $n:expr) => {
        impl<'a> ReadType<'a> for $t {
            fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_be_bytes(r.array::<$n>()?))
            }
        }
        impl WriteType for $t {
            fn write(&self, w: &mut Vec<u8>) {
                w.extend_from_slice(&self.to_be_bytes());
            }
        }
    };
}

fixed_int!(i8, 1);
fixed_int!(i16, 2);
fixed_int!(i32, 4);
fixed_int!(i64, 8);
fixed_int!(u32, 4);

impl<'a> ReadType<'a> for bool {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        match i8::read(r)? {
            0 => Ok(false),
            1 => Ok(true),
            x => Err(DecodeError::InvalidValue {
                what: "boolean",
                value: x as i64,
            }),
        }
    }
}

impl WriteType for bool {
    fn write(&self, w: &mut Vec<u8>) {
        w.push(*self as u8);
    }
}

/// An unsigned LEB128 varint of at most 5 bytes (lengths, counts, tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsignedVarint(pub u32);

impl<'a> ReadType<'a> for UnsignedVarint {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let mut v: u64 = 0;
        for i in 0..5 {
            let b = u8::from_be_bytes(r.array::<1>()?);
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return u32::try_from(v)
                    .map(UnsignedVarint)
                    .map_err(|_| DecodeError::VarintOverflow);
            }
        }
        Err(DecodeError::VarintOverflow)
    }
}

impl WriteType for UnsignedVarint {
    fn write(&self, w: &mut Vec<u8>) {
        write_uvarint64(self.0 as u64, w);
    }
}

/// A zig-zag varint (`int32` in record fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Varint(pub i32);

impl<'a> ReadType<'a> for Varint {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let v = read_uvarint64(r, 5)?;
        let v = u32::try_from(v).map_err(|_| DecodeError::VarintOverflow)?;
        Ok(Varint(((v >> 1) as i32) ^ -((v & 1) as i32)))
    }
}

impl WriteType for Varint {
    fn write(&self, w: &mut Vec<u8>) {
        write_uvarint64(((self.0 << 1) ^ (self.0 >> 31)) as u32 as u64, w);
    }
}

/// A zig-zag varlong (`int64` in record fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Varlong(pub i64);

impl<'a> ReadType<'a> for Varlong {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let v = read_uvarint64(r, 10)?;
        Ok(Varlong(((v >> 1) as i64) ^ -((v & 1) as i64)))
    }
}

impl WriteType for Varlong {
    fn write(&self, w: &mut Vec<u8>) {
        write_uvarint64(((self.0 << 1) ^ (self.0 >> 63)) as u64, w);
    }
}

fn read_uvarint64(r: &mut Reader<'_>, max_bytes: usize) -> Result<u64, DecodeError> {
    let mut v: u64 = 0;
    for i in 0..max_bytes {
        let b = u8::from_be_bytes(r.array::<1>()?);
        let bits = (b & 0x7f) as u64;
        // The 10th byte of a varlong may carry one bit only.
        if i == 9 && bits > 1 {
            return Err(DecodeError::VarintOverflow);
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeError::VarintOverflow)
}

fn write_uvarint64(mut v: u64, w: &mut Vec<u8>) {
    while v >= 0x80 {
        w.push((v as u8) | 0x80);
        v >>= 7;
    }
    w.push(v as u8);
}

/// Encoded size of an unsigned varint.
pub fn uvarint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Encoded size of a zig-zag varint.
pub fn varint_len(v: i32) -> usize {
    uvarint_len(((v << 1) ^ (v >> 31)) as u32 as u64)
}

/// Encoded size of a zig-zag varlong.
pub fn varlong_len(v: i64) -> usize {
    uvarint_len(((v << 1) ^ (v >> 63)) as u64)
}

/// A 128-bit UUID (topic ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl<'a> ReadType<'a> for Uuid {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Uuid(r.array::<16>()?))
    }
}

impl WriteType for Uuid {
    fn write(&self, w: &mut Vec<u8>) {
        w.extend_from_slice(&self.0);
    }
}

/// Writing helpers for the version-dependent encodings (classic or compact).
pub trait WriteExt {
    /// A length or count prefix (`None` = null).
    fn put_length(&mut self, len: Option<usize>, compact: bool);
    /// A non-null string.
    fn put_string(&mut self, s: &str, compact: bool);
    /// A nullable string.
    fn put_nullable_string(&mut self, s: Option<&str>, compact: bool);
    /// Nullable bytes.
    fn put_nullable_bytes(&mut self, b: Option<&[u8]>, compact: bool);
    /// An empty set of tagged fields, when `flexible`.
    fn put_empty_tagged_fields(&mut self, flexible: bool);
    /// Tagged fields, `(tag, encoded value)`, in ascending tag order.
    fn put_tagged_fields(&mut self, fields: &[(u32, Vec<u8>)]);
}

impl WriteExt for Vec<u8> {
    fn put_length(&mut self, len: Option<usize>, compact: bool) {
        match (len, compact) {
            (None, true) => UnsignedVarint(0).write(self),
            (Some(n), true) => write_uvarint64(n as u64 + 1, self),
            (None, false) => (-1i32).write(self),
            (Some(n), false) => (n as i32).write(self),
        }
    }

    fn put_string(&mut self, s: &str, compact: bool) {
        self.put_nullable_string(Some(s), compact)
    }

    fn put_nullable_string(&mut self, s: Option<&str>, compact: bool) {
        match (s, compact) {
            (s, true) => {
                self.put_length(s.map(str::len), true);
            }
            (None, false) => (-1i16).write(self),
            (Some(s), false) => (s.len() as i16).write(self),
        }
        if let Some(s) = s {
            self.extend_from_slice(s.as_bytes());
        }
    }

    fn put_nullable_bytes(&mut self, b: Option<&[u8]>, compact: bool) {
        self.put_length(b.map(<[u8]>::len), compact);
        if let Some(b) = b {
            self.extend_from_slice(b);
        }
    }

    fn put_empty_tagged_fields(&mut self, flexible: bool) {
        if flexible {
            self.push(0);
        }
    }

    fn put_tagged_fields(&mut self, fields: &[(u32, Vec<u8>)]) {
        UnsignedVarint(fields.len() as u32).write(self);
        for (tag, v) in fields {
            UnsignedVarint(*tag).write(self);
            UnsignedVarint(v.len() as u32).write(self);
            self.extend_from_slice(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip<T>(v: T)
    where
        T: for<'a> ReadType<'a> + WriteType + PartialEq + std::fmt::Debug,
    {
        let mut buf = Vec::new();
        v.write(&mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(T::read(&mut r).unwrap(), v);
        r.expect_end().unwrap();
        // Every strict prefix is a clean error.
        for cut in 0..buf.len() {
            assert!(T::read(&mut Reader::new(&buf[..cut])).is_err());
        }
    }

    proptest! {
        #[test]
        fn ints_roundtrip(a: i8, b: i16, c: i32, d: i64, e: u32, f: bool) {
            roundtrip(a); roundtrip(b); roundtrip(c); roundtrip(d); roundtrip(e); roundtrip(f);
        }

        #[test]
        fn varints_roundtrip(a: i32, b: i64, c: u32) {
            roundtrip(Varint(a));
            roundtrip(Varlong(b));
            roundtrip(UnsignedVarint(c));
            let mut buf = Vec::new();
            Varint(a).write(&mut buf);
            prop_assert_eq!(buf.len(), varint_len(a));
            buf.clear();
            Varlong(b).write(&mut buf);
            prop_assert_eq!(buf.len(), varlong_len(b));
        }

        #[test]
        fn strings_roundtrip(s in ".{0,40}", n in proptest::option::of(".{0,10}"), compact: bool) {
            let mut buf = Vec::new();
            buf.put_string(&s, compact);
            buf.put_nullable_string(n.as_deref(), compact);
            buf.put_nullable_bytes(Some(s.as_bytes()), compact);
            buf.put_nullable_bytes(None, compact);
            let mut r = Reader::new(&buf);
            prop_assert_eq!(r.string(compact).unwrap(), s.clone());
            prop_assert_eq!(r.nullable_string(compact).unwrap(), n);
            prop_assert_eq!(r.nullable_bytes(compact).unwrap(), Some(s.as_bytes()));
            prop_assert_eq!(r.nullable_bytes(compact).unwrap(), None);
            r.expect_end().unwrap();
        }

        #[test]
        fn arrays_roundtrip(v: Vec<i32>, compact: bool) {
            let mut buf = Vec::new();
            buf.put_length(Some(v.len()), compact);
            for x in &v { x.write(&mut buf); }
            let mut r = Reader::new(&buf);
            prop_assert_eq!(r.array_of(compact, 4, i32::read).unwrap(), v);
            r.expect_end().unwrap();
        }

        #[test]
        fn tagged_fields_roundtrip(fields in proptest::collection::vec((0u32..1000, proptest::collection::vec(any::<u8>(), 0..20)), 0..5)) {
            let mut buf = Vec::new();
            buf.put_tagged_fields(&fields);
            let mut r = Reader::new(&buf);
            let got: Vec<(u32, Vec<u8>)> = r.tagged_fields().unwrap().into_iter().map(|(t, b)| (t, b.to_vec())).collect();
            prop_assert_eq!(got, fields);
        }
    }

    #[test]
    fn uuid_roundtrip() {
        roundtrip(Uuid([7; 16]));
    }

    #[test]
    fn known_varint_encodings() {
        let mut buf = Vec::new();
        Varint(-1).write(&mut buf);
        Varint(1).write(&mut buf);
        Varint(300).write(&mut buf);
        assert_eq!(buf, [0x01, 0x02, 0xd8, 0x04]);
    }

    #[test]
    fn forged_counts_are_refused_before_allocating() {
        // A compact array claiming 2^31 elements in a 6-byte frame.
        let buf = [0xff, 0xff, 0xff, 0xff, 0x07, 0x00];
        let err = Reader::new(&buf).array_of(true, 4, i32::read).unwrap_err();
        assert!(matches!(err, DecodeError::CountTooLarge { .. }), "{err}");
        let buf = [0x7f, 0xff, 0xff, 0xff];
        assert!(Reader::new(&buf).array_of(false, 1, i8::read).is_err());
        assert!(Reader::new(&[0xff; 11]).tagged_fields().is_err());
        assert!(Varlong::read(&mut Reader::new(&[0xff; 10])).is_err());
        assert!(UnsignedVarint::read(&mut Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x7f])).is_err());
    }
}
