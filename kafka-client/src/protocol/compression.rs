//! The compression codecs of record batches, framed exactly as the Java client frames them, so
//! that batches written by either side are read by the other.
//!
//! | codec | attribute bits | framing | crate |
//! | --- | --- | --- | --- |
//! | gzip | 1 | gzip members (RFC 1952), as `GZIPOutputStream` | `flate2`, pure-Rust `miniz_oxide` backend |
//! | snappy | 2 | xerial `SnappyOutputStream`: `\x82SNAPPY\0`, two `i32` versions, then (`i32` length, raw snappy block) chunks of 32 KiB input; raw snappy is read too | `snap` |
//! | lz4 | 3 | LZ4 frame, 64 KiB independent blocks, no checksums, as Kafka's `Lz4BlockOutputStream` | `lz4_flex` |
//! | zstd | 4 | zstd frames, level 3 like `zstd-jni`'s default | `zstd` (libzstd, the library `zstd-jni` wraps) |
//!
//! The enum is [`Compression`] (re-exported by [`record`](super::record)), its attribute bits
//! are `attributes & 0x07` ([`from_attributes`]).
//!
//! # Bounded decompression
//!
//! [`decompress`] reads untrusted bytes from the network. It never panics, the output it
//! allocates never exceeds `max_output` bytes whatever the input claims, and its work is
//! linear in what it was sent up to that bound: no codec does work in proportion to a size
//! declared by the input before the data that backs it is there.
//!
//! - gzip and snappy grow the output step by step, never past the bound; a declared snappy
//!   length is checked against the bound and against the most its block could expand to (21x),
//!   so a 5-byte block cannot make us zero `max_output` bytes.
//! - lz4 blocks are sized exactly from their sequences (one pass over the block, no output)
//!   and decoded into what they produce: a block that declares 4 MiB blocks but holds one byte
//!   costs one byte, and a block over the bound is refused before anything is decoded.
//! - zstd decodes in one pass straight into the output buffer, which libzstd then uses as its
//!   window: a frame declaring a huge window allocates no window buffer. The buffer's capacity
//!   is the frames' recorded content size, or libzstd's bound from the block headers, never
//!   more than `max_output`; pages are touched only as output is written.
//!
//! A stream that would exceed the bound is [`DecodeError::DecompressedTooLarge`]. Besides the
//! output, the codecs keep fixed-size state (deflate's 32 KiB window, a zstd context per
//! thread). `benches/decoders.rs` measures the inputs that cost the most per byte.
//!
//! # How far one batch may inflate
//!
//! Whatever the fetch's budget, the consumer bounds each compressed batch by its own size
//! ([`inflation_bound`]): [`DEFAULT_MAX_RATIO`] times its compressed bytes, and never less than
//! [`MIN_INFLATION_BOUND`]. A bomb's cost is then set by its own bytes (a 120 KB gzip bomb is
//! refused after 8 MiB, not after the 100 MiB a fetch may inflate to), while what producers
//! write passes: a batch of the Java producer's defaults holds at most about 1 MiB uncompressed
//! (`max.request.size`), under the floor whatever its ratio, and a batch the broker's default
//! `max.message.bytes` (1 MiB compressed) admits may inflate to 64 MiB, which takes a ratio
//! that only synthetic data reaches (JSON logs compress 5-20x).

use std::cell::RefCell;
use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use super::DecodeError;

/// The codec of a batch (`compression.type`, attribute bits 0-2). `BatchWriter::seal`
/// compresses the records section with it, the batch decoder inflates it (bounded); the
/// codecs are this module's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// No compression.
    #[default]
    None,
    /// gzip (1).
    Gzip,
    /// snappy (2).
    Snappy,
    /// lz4 (3).
    Lz4,
    /// zstd (4).
    Zstd,
}

impl Compression {
    /// Attribute bits.
    pub fn attribute_bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Whether this build can encode and decode it (every codec: gzip, snappy, lz4, zstd).
    pub fn is_supported(self) -> bool {
        true
    }

    /// The name used by `compression.type`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "none" => Compression::None,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => {
                return Err(format!(
                    "unknown codec {s:?} (none, gzip, snappy, lz4, zstd)"
                ));
            }
        })
    }
}

/// The most bytes of output per compressed byte a batch may have by default
/// (`fetch.max.compression.ratio`).
pub const DEFAULT_MAX_RATIO: usize = 64;

/// Any compressed batch may inflate to this much, whatever its ratio: more than a batch the
/// Java producer writes at its defaults holds (`max.request.size`, 1 MiB).
pub const MIN_INFLATION_BOUND: usize = 8 << 20;

/// The most a batch of `compressed` bytes may inflate to at `ratio`: `ratio` times its size,
/// at least [`MIN_INFLATION_BOUND`].
pub fn inflation_bound(compressed: usize, ratio: usize) -> usize {
    compressed.saturating_mul(ratio).max(MIN_INFLATION_BOUND)
}

/// Snappy's xerial stream header: magic, stream version 1, compatible version 1.
const XERIAL_MAGIC: [u8; 8] = *b"\x82SNAPPY\0";
const XERIAL_HEADER_LEN: usize = 16;
/// `SnappyOutputStream`'s default block size: the input is compressed in chunks of this much.
const XERIAL_BLOCK: usize = 32 * 1024;
/// A raw snappy block expands at most ~21x (a 3-byte copy element yields 64 bytes); a declared
/// length beyond this multiple of the block is corrupt, and refused before allocating for it.
const SNAPPY_MAX_RATIO: usize = 32;

const LZ4_MAGIC: u32 = 0x184D_2204;

/// Java's `GZIPOutputStream` default: `Deflater.DEFAULT_COMPRESSION`, which zlib maps to 6.
const GZIP_LEVEL: u32 = 6;
/// `zstd-jni`'s (and libzstd's) default level, the Java producer's unless
/// `compression.zstd.level` says otherwise.
const ZSTD_LEVEL: i32 = 3;

/// The codec named by a record batch's attributes (bits 0-2): 0 none, 1 gzip, 2 snappy,
/// 3 lz4, 4 zstd; 5-7 are [`DecodeError::UnsupportedCompression`].
pub fn from_attributes(attributes: i16) -> Result<Compression, DecodeError> {
    match attributes & 0x07 {
        0 => Ok(Compression::None),
        1 => Ok(Compression::Gzip),
        2 => Ok(Compression::Snappy),
        3 => Ok(Compression::Lz4),
        4 => Ok(Compression::Zstd),
        bits => Err(DecodeError::UnsupportedCompression(bits as u8)),
    }
}

/// Appends `input` compressed with `codec` to `out` (for [`Compression::None`], `input`
/// itself), framed as the Java producer frames it.
///
/// Compressing into memory fails only where a codec's own limits are exceeded (snappy takes
/// blocks below 4 GiB; the blocks here are 32 KiB) or libzstd cannot allocate its context.
pub fn compress(codec: Compression, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    match codec {
        Compression::None => out.extend_from_slice(input),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::new(GZIP_LEVEL));
            enc.write_all(input)?;
            enc.finish()?;
        }
        Compression::Snappy => snappy_xerial_compress(input, out)?,
        Compression::Lz4 => {
            use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
            let info = FrameInfo::new()
                .block_size(BlockSize::Max64KB)
                .block_mode(BlockMode::Independent)
                .block_checksums(false)
                .content_checksum(false);
            let mut enc = FrameEncoder::with_frame_info(info, out);
            enc.write_all(input)?;
            enc.finish().map_err(io::Error::other)?;
        }
        Compression::Zstd => ZSTD_COMPRESSOR.with(|c| -> io::Result<()> {
            let mut slot = c.borrow_mut();
            let compressor = match &mut *slot {
                Some(c) => c,
                None => slot.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
            };
            out.extend_from_slice(&compressor.compress(input)?);
            Ok(())
        })?,
    }
    Ok(())
}

/// Decompresses `input` (the records section of a batch compressed with `codec`) into at most
/// `max_output` bytes. Corrupt input, and input that would decompress to more than
/// `max_output` bytes, are errors; nothing panics and nothing larger than `max_output` is
/// allocated for the output.
pub fn decompress(
    codec: Compression,
    input: &[u8],
    max_output: usize,
) -> Result<Vec<u8>, DecodeError> {
    match codec {
        Compression::None => {
            if input.len() > max_output {
                return Err(too_large(input.len(), max_output));
            }
            Ok(input.to_vec())
        }
        Compression::Gzip => gzip_decompress(input, max_output),
        Compression::Snappy => snappy_decompress(input, max_output),
        Compression::Lz4 => lz4_decompress(input, max_output),
        Compression::Zstd => zstd_decompress(input, max_output),
    }
}

// --- errors ------------------------------------------------------------------------------------

/// A corrupt stream; `offset` is where in the input it was noticed (0 where the codec does not
/// say).
fn corrupt(codec: Compression, offset: usize) -> DecodeError {
    DecodeError::InvalidValue {
        what: match codec {
            Compression::Gzip => "gzip stream, corrupt at input offset",
            Compression::Snappy => "snappy stream, corrupt at input offset",
            Compression::Lz4 => "lz4 frame, corrupt at input offset",
            Compression::Zstd | Compression::None => "zstd frame, corrupt at input offset",
        },
        value: offset as i64,
    }
}

fn too_large(at_least: usize, max: usize) -> DecodeError {
    DecodeError::DecompressedTooLarge { at_least, max }
}

// --- bounded output ----------------------------------------------------------------------------

/// Makes room for `additional` more bytes, growing geometrically but never past `max`.
fn reserve_bounded(out: &mut Vec<u8>, additional: usize, max: usize) -> Result<(), DecodeError> {
    let needed = out.len().saturating_add(additional);
    if needed > max {
        return Err(too_large(needed, max));
    }
    if needed > out.capacity() {
        let target = out
            .capacity()
            .saturating_mul(2)
            .max(needed)
            .max(4096)
            .min(max);
        out.reserve_exact(target - out.len());
    }
    Ok(())
}

/// Reads `reader` to its end into at most `max` bytes.
fn read_bounded(
    mut reader: impl Read,
    codec: Compression,
    initial: usize,
    max: usize,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(initial.min(max));
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => {
                reserve_bounded(&mut out, n, max)?;
                out.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(corrupt(codec, 0)),
        }
    }
}

// --- gzip --------------------------------------------------------------------------------------

fn gzip_decompress(input: &[u8], max: usize) -> Result<Vec<u8>, DecodeError> {
    // Several concatenated members read as one stream, as `GZIPInputStream` reads them.
    let decoder = flate2::read::MultiGzDecoder::new(input);
    read_bounded(
        decoder,
        Compression::Gzip,
        input.len().saturating_mul(4),
        max,
    )
}

// --- snappy ------------------------------------------------------------------------------------

fn snappy_xerial_compress(input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut enc = snap::raw::Encoder::new();
    for block in input.chunks(XERIAL_BLOCK) {
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        out.resize(start + snap::raw::max_compress_len(block.len()), 0);
        let n = enc
            .compress(block, &mut out[start..])
            .map_err(io::Error::other)?;
        out.truncate(start + n);
        out[len_at..start].copy_from_slice(&(n as i32).to_be_bytes());
    }
    Ok(())
}

fn snappy_decompress(input: &[u8], max: usize) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    if input.len() >= XERIAL_HEADER_LEN && input[..8] == XERIAL_MAGIC {
        // The versions are not checked: every snappy-java writes 1 and 1.
        let mut pos = XERIAL_HEADER_LEN;
        while pos < input.len() {
            // Streams written one after the other: a second header where a length would be.
            if input[pos..].starts_with(&XERIAL_MAGIC) {
                if input.len() - pos < XERIAL_HEADER_LEN {
                    return Err(corrupt(Compression::Snappy, pos));
                }
                pos += XERIAL_HEADER_LEN;
                continue;
            }
            let Some(len) = input.get(pos..pos + 4) else {
                return Err(corrupt(Compression::Snappy, pos));
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            let end = usize::try_from(len)
                .ok()
                .and_then(|len| pos.checked_add(4 + len))
                .filter(|&end| end <= input.len())
                .ok_or(corrupt(Compression::Snappy, pos))?;
            snappy_raw_block(&input[pos + 4..end], pos + 4, &mut out, max)?;
            pos = end;
        }
    } else {
        snappy_raw_block(input, 0, &mut out, max)?;
    }
    Ok(out)
}

/// Appends one raw snappy block (length-prefixed by a varint) to `out`.
fn snappy_raw_block(
    block: &[u8],
    offset: usize,
    out: &mut Vec<u8>,
    max: usize,
) -> Result<(), DecodeError> {
    let len = snap::raw::decompress_len(block).map_err(|_| corrupt(Compression::Snappy, offset))?;
    if len > block.len().saturating_mul(SNAPPY_MAX_RATIO) {
        return Err(corrupt(Compression::Snappy, offset));
    }
    reserve_bounded(out, len, max)?;
    let start = out.len();
    out.resize(start + len, 0);
    match snap::raw::Decoder::new().decompress(block, &mut out[start..]) {
        Ok(n) if n == len => Ok(()),
        _ => Err(corrupt(Compression::Snappy, offset)),
    }
}

// --- lz4 ---------------------------------------------------------------------------------------

fn le_u32(input: &[u8], pos: usize) -> Option<u32> {
    let b = input.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn xxh32(data: &[u8]) -> u32 {
    twox_hash::XxHash32::oneshot(0, data)
}

/// LZ4 frames (one or more, back to back), decoded block by block straight into the output.
/// What Kafka's `Lz4BlockInputStream` refuses is refused: another version, reserved bits,
/// dictionaries, dependent blocks. Header, block and content checksums are verified when
/// present.
fn lz4_decompress(input: &[u8], max: usize) -> Result<Vec<u8>, DecodeError> {
    let bad = |pos: usize| corrupt(Compression::Lz4, pos);
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let frame_start = pos;
        if le_u32(input, pos) != Some(LZ4_MAGIC) {
            return Err(bad(pos));
        }
        pos += 4;
        let (&flg, &bd) = match input.get(pos..pos + 2) {
            Some([flg, bd]) => (flg, bd),
            _ => return Err(bad(pos)),
        };
        let version = flg >> 6;
        let independent = flg & 0x20 != 0;
        let block_checksum = flg & 0x10 != 0;
        let has_content_size = flg & 0x08 != 0;
        let content_checksum = flg & 0x04 != 0;
        let reserved_or_dict = flg & 0x03 != 0;
        if version != 1 || !independent || reserved_or_dict || bd & 0x8F != 0 {
            return Err(bad(pos));
        }
        let block_max = match (bd >> 4) & 0x07 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            _ => return Err(bad(pos + 1)),
        };
        let descriptor_start = pos;
        pos += 2;
        let content_size = if has_content_size {
            let b = input.get(pos..pos + 8).ok_or(bad(pos))?;
            pos += 8;
            let size = u64::from_le_bytes(b.try_into().map_err(|_| bad(pos))?);
            if size > (max - out.len()) as u64 {
                return Err(too_large(usize::try_from(size).unwrap_or(usize::MAX), max));
            }
            Some(size as usize)
        } else {
            None
        };
        let hc = *input.get(pos).ok_or(bad(pos))?;
        if hc != (xxh32(&input[descriptor_start..pos]) >> 8) as u8 {
            return Err(bad(pos));
        }
        pos += 1;
        let out_start = out.len();
        loop {
            let header = le_u32(input, pos).ok_or(bad(pos))?;
            pos += 4;
            if header == 0 {
                break; // end mark
            }
            let stored = header & 0x8000_0000 != 0;
            let size = (header & 0x7FFF_FFFF) as usize;
            if size > block_max {
                return Err(bad(pos - 4));
            }
            let data = input.get(pos..pos + size).ok_or(bad(pos))?;
            if block_checksum {
                let sum = le_u32(input, pos + size).ok_or(bad(pos + size))?;
                if sum != xxh32(data) {
                    return Err(bad(pos + size));
                }
            }
            if stored {
                reserve_bounded(&mut out, size, max)?;
                out.extend_from_slice(data);
            } else {
                let n = match lz4_block_output(data, block_max.min(max - out.len())) {
                    Lz4Output::Exact(n) => n,
                    Lz4Output::Corrupt => return Err(bad(pos)),
                    Lz4Output::Over(_) if max - out.len() >= block_max => return Err(bad(pos)),
                    Lz4Output::Over(n) => return Err(too_large(out.len() + n, max)),
                };
                reserve_bounded(&mut out, n, max)?;
                let start = out.len();
                out.resize(start + n, 0);
                match lz4_flex::block::decompress_into(data, &mut out[start..]) {
                    Ok(written) if written == n => {}
                    _ => return Err(bad(pos)),
                }
            }
            pos += size + if block_checksum { 4 } else { 0 };
        }
        if content_size.is_some_and(|size| size != out.len() - out_start) {
            return Err(bad(frame_start));
        }
        if content_checksum {
            let sum = le_u32(input, pos).ok_or(bad(pos))?;
            if sum != xxh32(&out[out_start..]) {
                return Err(bad(pos));
            }
            pos += 4;
        }
        if pos == input.len() {
            return Ok(out);
        }
    }
}

/// What an lz4 block decodes to, read from its sequences without decoding them.
#[derive(Debug, PartialEq, Eq)]
enum Lz4Output {
    /// Exactly this many bytes.
    Exact(usize),
    /// More than the limit: at least this many.
    Over(usize),
    /// Not a well-formed block (a sequence runs past its end).
    Corrupt,
}

/// One lz4 length extension: bytes of 255 continue it, the first other byte ends it.
fn lz4_length_extension(block: &[u8], pos: &mut usize) -> Option<usize> {
    let mut n = 0usize;
    loop {
        let b = *block.get(*pos)?;
        *pos += 1;
        n += usize::from(b);
        if b != 255 {
            return Some(n);
        }
    }
}

/// The size `block` decodes to, from its sequences' literal and match lengths (a pass over the
/// block's control bytes; literals are skipped, not read), stopping as soon as it is over
/// `limit`. Match offsets are checked by the decoder itself.
fn lz4_block_output(block: &[u8], limit: usize) -> Lz4Output {
    let (mut pos, mut out) = (0usize, 0usize);
    loop {
        let Some(&token) = block.get(pos) else {
            return Lz4Output::Corrupt;
        };
        pos += 1;
        let mut literals = usize::from(token >> 4);
        if literals == 15 {
            match lz4_length_extension(block, &mut pos) {
                Some(n) => literals += n,
                None => return Lz4Output::Corrupt,
            }
        }
        pos += literals;
        out += literals;
        if pos > block.len() {
            return Lz4Output::Corrupt;
        }
        if out > limit {
            return Lz4Output::Over(out);
        }
        if pos == block.len() {
            return Lz4Output::Exact(out); // the last sequence has literals only
        }
        pos += 2; // match offset
        let mut match_len = usize::from(token & 0x0F) + 4;
        if token & 0x0F == 0x0F {
            match lz4_length_extension(block, &mut pos) {
                Some(n) => match_len += n,
                None => return Lz4Output::Corrupt,
            }
        }
        out += match_len;
        if out > limit {
            return Lz4Output::Over(out);
        }
    }
}

// --- zstd --------------------------------------------------------------------------------------

thread_local! {
    static ZSTD_COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// One pass into a buffer of the exact size when every frame records its content size (which
/// must then fit the bound), else of libzstd's bound from the block headers (blocks times the
/// 128 KiB block maximum: one block for a typical Java batch, whose streaming frames record no
/// content size), never more than `max`.
fn zstd_decompress(input: &[u8], max: usize) -> Result<Vec<u8>, DecodeError> {
    ZSTD_DECOMPRESSOR.with(|d| {
        let mut slot = d.borrow_mut();
        let decompressor = match &mut *slot {
            Some(d) => d,
            None => slot.insert(
                zstd::bulk::Decompressor::new().map_err(|_| corrupt(Compression::Zstd, 0))?,
            ),
        };
        let mut out = decompressor.decompress(input, max).map_err(|e| {
            if e.to_string().contains("too small") {
                too_large(max.saturating_add(1), max)
            } else {
                corrupt(Compression::Zstd, 0)
            }
        })?;
        out.shrink_to_fit();
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn roundtrip(codec: Compression, data: &[u8]) -> Vec<u8> {
        let mut c = Vec::new();
        compress(codec, data, &mut c).unwrap();
        let d = decompress(codec, &c, data.len()).unwrap();
        assert_eq!(d, data, "{codec}");
        if !data.is_empty() {
            assert!(
                decompress(codec, &c, data.len() - 1).is_err(),
                "{codec}: bound"
            );
        }
        c
    }

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8 ^ (i / 1000) as u8).collect()
    }

    #[test]
    fn attribute_bits() {
        for (bits, c) in CODECS.iter().enumerate() {
            assert_eq!(from_attributes(bits as i16).unwrap(), *c);
            assert_eq!(c.attribute_bits(), bits as i16);
            // Other attribute bits (timestamp type, transactional, control) do not matter.
            assert_eq!(from_attributes(bits as i16 | 0x38).unwrap(), *c);
        }
        for bits in 5..8 {
            assert_eq!(
                from_attributes(bits),
                Err(DecodeError::UnsupportedCompression(bits as u8))
            );
        }
    }

    #[test]
    fn roundtrip_sizes() {
        for codec in CODECS {
            for n in [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 65 * 1024, 300_000] {
                roundtrip(codec, &sample(n));
            }
        }
    }

    #[test]
    fn framing_is_javas() {
        let data = sample(100_000);
        // snappy: xerial header, then 32 KiB input blocks.
        let c = roundtrip(Compression::Snappy, &data);
        assert_eq!(&c[..16], b"\x82SNAPPY\0\0\0\0\x01\0\0\0\x01");
        let mut pos = 16;
        let mut blocks = 0;
        while pos < c.len() {
            let len = i32::from_be_bytes(c[pos..pos + 4].try_into().unwrap()) as usize;
            assert_eq!(
                snap::raw::decompress_len(&c[pos + 4..]).unwrap(),
                (data.len() - blocks * XERIAL_BLOCK).min(XERIAL_BLOCK)
            );
            pos += 4 + len;
            blocks += 1;
        }
        assert_eq!(blocks, 4);
        // lz4: magic, FLG = version 1 + independent blocks, BD = 64 KiB, no content size.
        let c = roundtrip(Compression::Lz4, &data);
        assert_eq!(&c[..6], &[0x04, 0x22, 0x4d, 0x18, 0x60, 0x40]);
        assert_eq!(&c[c.len() - 4..], &[0, 0, 0, 0]);
        // gzip: a gzip member, deflate.
        let c = roundtrip(Compression::Gzip, &data);
        assert_eq!(&c[..3], &[0x1f, 0x8b, 0x08]);
        // zstd: a zstd frame.
        let c = roundtrip(Compression::Zstd, &data);
        assert_eq!(&c[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
    }

    #[test]
    fn raw_and_concatenated_snappy_are_read() {
        let data = sample(50_000);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(
            decompress(Compression::Snappy, &raw, data.len()).unwrap(),
            data
        );
        let mut two = Vec::new();
        compress(Compression::Snappy, &data[..20_000], &mut two).unwrap();
        compress(Compression::Snappy, &data[20_000..], &mut two).unwrap();
        assert_eq!(
            decompress(Compression::Snappy, &two, data.len()).unwrap(),
            data
        );
    }

    #[test]
    fn gzip_members_and_lz4_frames_concatenate() {
        let data = sample(70_000);
        for codec in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            let mut two = Vec::new();
            compress(codec, &data[..10_000], &mut two).unwrap();
            compress(codec, &data[10_000..], &mut two).unwrap();
            assert_eq!(
                decompress(codec, &two, data.len()).unwrap(),
                data,
                "{codec}"
            );
        }
    }

    #[test]
    fn lz4_checksums_and_content_size_are_checked() {
        use lz4_flex::frame::{BlockSize, FrameEncoder, FrameInfo};
        let data = sample(150_000);
        let info = FrameInfo::new()
            .block_size(BlockSize::Max256KB)
            .block_checksums(true)
            .content_checksum(true)
            .content_size(Some(data.len() as u64));
        let mut enc = FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(&data).unwrap();
        let c = enc.finish().unwrap();
        assert_eq!(decompress(Compression::Lz4, &c, data.len()).unwrap(), data);
        // The declared content size is checked against the bound before decoding.
        assert!(decompress(Compression::Lz4, &c, data.len() - 1).is_err());
        // Any flipped byte is caught by a checksum (or breaks the frame).
        for i in [5, 7, 20, c.len() / 2, c.len() - 2] {
            let mut bad = c.clone();
            bad[i] ^= 0x40;
            assert!(
                decompress(Compression::Lz4, &bad, 1 << 20).is_err(),
                "byte {i}"
            );
        }
    }

    #[test]
    fn lz4_dependent_blocks_are_refused_like_kafka() {
        let mut c = Vec::new();
        compress(Compression::Lz4, b"hello", &mut c).unwrap();
        c[4] &= !0x20; // clear the block independence flag
        c[6] = (xxh32(&c[4..6]) >> 8) as u8;
        assert!(decompress(Compression::Lz4, &c, 100).is_err());
    }

    #[test]
    fn bombs_stop_at_the_bound() {
        let zeros = vec![0u8; 4 << 20];
        for codec in CODECS {
            let mut c = Vec::new();
            compress(codec, &zeros, &mut c).unwrap();
            let err = decompress(codec, &c, 1 << 20).unwrap_err();
            assert!(
                matches!(err, DecodeError::DecompressedTooLarge { max, .. } if max == 1 << 20),
                "{codec}: {err}"
            );
        }
        // A raw snappy block claiming 2^31 bytes in 6 bytes: refused before allocating.
        let forged = [0x80, 0x80, 0x80, 0x80, 0x08, 0x00];
        assert!(decompress(Compression::Snappy, &forged, usize::MAX).is_err());
        // A zstd frame header claiming 2^40 bytes.
        let mut z = Vec::new();
        compress(Compression::Zstd, b"abc", &mut z).unwrap();
        assert!(decompress(Compression::Zstd, &z, 2).is_err());
    }

    #[test]
    fn lz4_blocks_are_sized_before_they_are_decoded() {
        // The review's frame: 1-byte blocks in a frame declaring 4 MiB blocks produce nothing
        // and cost nothing.
        let mut f = vec![0x04, 0x22, 0x4d, 0x18, 0x60, 0x70];
        f.push((xxh32(&f[4..6]) >> 8) as u8);
        for _ in 0..1000 {
            f.extend_from_slice(&[1, 0, 0, 0, 0]);
        }
        f.extend_from_slice(&[0; 4]);
        assert_eq!(decompress(Compression::Lz4, &f, 1 << 30).unwrap(), b"");
        // A block producing more than the bound is refused from its lengths alone.
        let block = [0x1F, b'a', 1, 0, 255, 255, 255, 0, 0x50, 1, 2, 3, 4, 5];
        assert_eq!(
            lz4_block_output(&block, usize::MAX),
            Lz4Output::Exact(1 + 19 + 765 + 5)
        );
        assert_eq!(lz4_block_output(&block, 100), Lz4Output::Over(1 + 19 + 765));
        assert_eq!(lz4_block_output(&block[..3], 100), Lz4Output::Corrupt);
        assert_eq!(lz4_block_output(&block[..6], 10_000), Lz4Output::Corrupt);
        assert_eq!(lz4_block_output(&[], 100), Lz4Output::Corrupt);
    }

    proptest! {
        #[test]
        fn lz4_block_sizes_are_exact(data in proptest::collection::vec(0u8..4, 0..5000)) {
            let block = lz4_flex::block::compress(&data);
            prop_assert_eq!(lz4_block_output(&block, usize::MAX), Lz4Output::Exact(data.len()));
        }

        #[test]
        fn roundtrip_any(data in proptest::collection::vec(any::<u8>(), 0..5000), codec in 0usize..5) {
            roundtrip(CODECS[codec], &data);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600), codec in 1usize..5, max in 0usize..4096) {
            if let Ok(out) = decompress(CODECS[codec], &data, max) {
                prop_assert!(out.len() <= max);
            }
        }

        #[test]
        fn mutations_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            codec in 1usize..5,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in any::<usize>(),
        ) {
            let codec = CODECS[codec];
            let mut c = Vec::new();
            compress(codec, &data, &mut c).unwrap();
            for (i, b) in flips {
                let i = i % c.len();
                c[i] = b;
            }
            c.truncate(cut % (c.len() + 1));
            if let Ok(out) = decompress(codec, &c, 4096) {
                prop_assert!(out.len() <= 4096);
            }
        }
    }
}
