//! Inputs built to cost a decoder the most per input byte: for each codec, the shapes that make
//! it do work out of proportion to what it was sent (declared sizes, bombs, per-frame or
//! per-block fixed costs). Shared by `tests/decoder_cost.rs` and `benches/decoders.rs`.
//!
//! Each builder returns the bytes of a `records` section as a batch would carry them, about
//! `len` bytes long.

#![allow(dead_code)]

use std::io::Write;

use kafka_client::testing::protocol::compression::Compression;

/// A named hostile input.
pub struct Hostile {
    pub codec: Compression,
    pub name: &'static str,
    pub bytes: Vec<u8>,
}

/// Every hostile input, each about `len` bytes.
pub fn all(len: usize) -> Vec<Hostile> {
    let h = |codec, name, bytes| Hostile { codec, name, bytes };
    vec![
        h(
            Compression::Lz4,
            "lz4: 1-byte blocks declaring 4 MiB",
            lz4_tiny_blocks(len / 5),
        ),
        h(
            Compression::Lz4,
            "lz4: 1-byte blocks declaring 4 MiB, checksummed",
            lz4_tiny_checksummed_blocks(len / 9),
        ),
        h(Compression::Lz4, "lz4: bomb (255:1)", lz4_bomb(len)),
        h(
            Compression::Lz4,
            "lz4: one literal per block, 4 MiB declared",
            lz4_literal_blocks(len / 6),
        ),
        h(Compression::Gzip, "gzip: bomb (1030:1)", gzip_bomb(len)),
        h(
            Compression::Gzip,
            "gzip: empty members",
            gzip_empty_members(len / 20),
        ),
        h(
            Compression::Gzip,
            "gzip: empty stored blocks",
            gzip_empty_stored_blocks(len / 5),
        ),
        h(
            Compression::Gzip,
            "gzip: dynamic-Huffman blocks",
            gzip_dynamic_blocks(len),
        ),
        h(Compression::Snappy, "snappy: bomb (21:1)", snappy_bomb(len)),
        h(
            Compression::Snappy,
            "snappy: empty xerial chunks",
            snappy_empty_chunks(len / 5),
        ),
        h(
            Compression::Zstd,
            "zstd: RLE blocks bomb (32768:1)",
            zstd_rle_bomb(len),
        ),
        h(
            Compression::Zstd,
            "zstd: empty frames",
            zstd_empty_frames(len / 9),
        ),
        h(
            Compression::Zstd,
            "zstd: empty compressed blocks",
            zstd_empty_compressed_blocks(len),
        ),
        h(
            Compression::Zstd,
            "zstd: tiny frames with their own tables",
            zstd_table_frames(len),
        ),
    ]
}

// --- lz4 ---------------------------------------------------------------------------------------

fn xxh32(data: &[u8]) -> u32 {
    twox_hash::XxHash32::oneshot(0, data)
}

/// An lz4 frame header: version 1, independent blocks, optional block checksums, no content
/// size, 4 MiB blocks.
fn lz4_header(block_checksums: bool) -> Vec<u8> {
    let mut f = 0x184D_2204u32.to_le_bytes().to_vec();
    let flg = 0x60 | if block_checksums { 0x10 } else { 0 };
    let bd = 0x70;
    f.extend_from_slice(&[flg, bd]);
    f.push((xxh32(&[flg, bd]) >> 8) as u8);
    f
}

/// The review's frame: `n` compressed blocks of one byte (a token with nothing in it), each in
/// a frame declaring 4 MiB blocks. 20,000 blocks make 100 KB.
pub fn lz4_tiny_blocks(n: usize) -> Vec<u8> {
    let mut f = lz4_header(false);
    for _ in 0..n {
        f.extend_from_slice(&1u32.to_le_bytes());
        f.push(0);
    }
    f.extend_from_slice(&0u32.to_le_bytes());
    f
}

/// The same with block checksums (9 bytes a block).
pub fn lz4_tiny_checksummed_blocks(n: usize) -> Vec<u8> {
    let mut f = lz4_header(true);
    let sum = xxh32(&[0]);
    for _ in 0..n {
        f.extend_from_slice(&1u32.to_le_bytes());
        f.push(0);
        f.extend_from_slice(&sum.to_le_bytes());
    }
    f.extend_from_slice(&0u32.to_le_bytes());
    f
}

/// Blocks of one literal byte each (6 bytes a block, 1 byte of output).
pub fn lz4_literal_blocks(n: usize) -> Vec<u8> {
    let mut f = lz4_header(false);
    for _ in 0..n {
        f.extend_from_slice(&2u32.to_le_bytes());
        f.extend_from_slice(&[0x10, b'a']);
    }
    f.extend_from_slice(&0u32.to_le_bytes());
    f
}

/// 4 MiB blocks, each one literal and one match of offset 1 as long as a block allows: 255
/// bytes out per byte in.
pub fn lz4_bomb(len: usize) -> Vec<u8> {
    let mut f = lz4_header(false);
    // One literal, a match of 4 MiB - 1 - 5 bytes, then 5 literals (the format's end rule).
    let match_len = (4 << 20) - 1 - 5;
    let mut block = vec![0x1F, b'a', 1, 0];
    let mut rest = match_len - 4 - 15;
    while rest >= 255 {
        block.push(255);
        rest -= 255;
    }
    block.push(rest as u8);
    block.extend_from_slice(&[0x50, b'a', b'a', b'a', b'a', b'a']);
    while f.len() + block.len() + 8 <= len.max(block.len() + 20) {
        f.extend_from_slice(&(block.len() as u32).to_le_bytes());
        f.extend_from_slice(&block);
    }
    f.extend_from_slice(&0u32.to_le_bytes());
    f
}

// --- gzip --------------------------------------------------------------------------------------

/// Zeros deflated at level 9 (about 1030 bytes out per byte in), as gzip members of 16 MiB
/// each, back to back.
pub fn gzip_bomb(len: usize) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&vec![0u8; 16 << 20]).unwrap();
    let member = enc.finish().unwrap();
    member.repeat(len.div_ceil(member.len()))
}

/// One gzip member with nothing in it (20 bytes).
const EMPTY_GZIP_MEMBER: [u8; 20] = [
    0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, // header
    0x03, 0x00, // a final, empty, fixed-Huffman block
    0, 0, 0, 0, 0, 0, 0, 0, // CRC32 and size of nothing
];

/// `n` empty members back to back.
pub fn gzip_empty_members(n: usize) -> Vec<u8> {
    EMPTY_GZIP_MEMBER.repeat(n.max(1))
}

/// One member of `n` empty stored blocks (5 bytes each).
pub fn gzip_empty_stored_blocks(n: usize) -> Vec<u8> {
    let mut f = EMPTY_GZIP_MEMBER[..10].to_vec();
    for _ in 0..n {
        f.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
    }
    f.extend_from_slice(&[0x03, 0x00]);
    f.extend_from_slice(&[0; 8]);
    f
}

/// Deflate's bit order: least significant bit first.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, bits: u32) {
        self.acc |= value << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code (written most significant bit first).
    fn code(&mut self, code: u64, bits: u32) {
        let mut rev = 0;
        for i in 0..bits {
            rev |= ((code >> i) & 1) << (bits - 1 - i);
        }
        self.put(rev, bits);
    }
}

/// One member of dynamic-Huffman blocks that each hold nothing: every block makes the
/// decoder build its code tables from about 12 bytes.
pub fn gzip_dynamic_blocks(len: usize) -> Vec<u8> {
    let mut b = Bits {
        out: EMPTY_GZIP_MEMBER[..10].to_vec(),
        acc: 0,
        n: 0,
    };
    // Code-length alphabet: 18 (a run of zeros) has 1 bit ("0"), 0 and 1 have 2 bits ("10",
    // "11"). Literal/length lengths: symbol 0 and 256 of length 1, the rest zero; one
    // distance code of length 1.
    const ORDER: [usize; 19] = [
        16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
    ];
    let mut cl = [0u64; 19];
    cl[18] = 1;
    cl[0] = 2;
    cl[1] = 2;
    while b.out.len() + 20 < len {
        b.put(0, 1); // not final
        b.put(2, 2); // dynamic
        b.put(0, 5); // HLIT: 257
        b.put(0, 5); // HDIST: 1
        b.put(14, 4); // HCLEN: 18 code-length codes
        for &sym in &ORDER[..18] {
            b.put(cl[sym], 3);
        }
        b.code(0b11, 2); // literal 0: length 1
        b.code(0b0, 1); // 18: 138 zeros (1..=138)
        b.put(127, 7);
        b.code(0b0, 1); // 18: 117 zeros (139..=255)
        b.put(106, 7);
        b.code(0b11, 2); // 256: length 1
        b.code(0b11, 2); // distance 0: length 1
        b.code(0b1, 1); // end of block (literal 0 is "0", 256 is "1")
    }
    b.put(1, 1); // final
    b.put(1, 2); // fixed Huffman
    b.put(0, 7); // end of block
    b.put(0, 7); // flush to the byte
    let mut out = b.out;
    out.extend_from_slice(&[0; 8]);
    out
}

// --- snappy ------------------------------------------------------------------------------------

fn uvarint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// xerial chunks, each a raw block of one literal and copies of 64 bytes at offset 1
/// (3 bytes each): 21 bytes out per byte in, 32 KiB per chunk as Java writes them.
pub fn snappy_bomb(len: usize) -> Vec<u8> {
    let mut out = b"\x82SNAPPY\0\0\0\0\x01\0\0\0\x01".to_vec();
    let mut block = Vec::new();
    uvarint(1 + 511 * 64, &mut block);
    block.extend_from_slice(&[0x00, b'a']);
    for _ in 0..511 {
        block.extend_from_slice(&[(63 << 2) | 2, 1, 0]);
    }
    while out.len() < len {
        out.extend_from_slice(&(block.len() as i32).to_be_bytes());
        out.extend_from_slice(&block);
    }
    out
}

/// `n` xerial chunks holding an empty raw block (5 bytes each).
pub fn snappy_empty_chunks(n: usize) -> Vec<u8> {
    let mut out = b"\x82SNAPPY\0\0\0\0\x01\0\0\0\x01".to_vec();
    for _ in 0..n {
        out.extend_from_slice(&1i32.to_be_bytes());
        out.push(0);
    }
    out
}

// --- zstd --------------------------------------------------------------------------------------

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A zstd frame header without content size, window 8 MiB.
fn zstd_header() -> Vec<u8> {
    let mut f = ZSTD_MAGIC.to_vec();
    f.push(0x00); // FHD: no content size, no checksum, not single-segment
    f.push(0x68); // window descriptor: 2^(10+13) = 8 MiB
    f
}

fn zstd_block_header(last: bool, kind: u32, size: u32, out: &mut Vec<u8>) {
    let h = u32::from(last) | (kind << 1) | (size << 3);
    out.extend_from_slice(&h.to_le_bytes()[..3]);
}

/// RLE blocks of 128 KiB (4 bytes each): 32768 bytes out per byte in.
pub fn zstd_rle_bomb(len: usize) -> Vec<u8> {
    let mut f = zstd_header();
    while f.len() + 8 < len {
        zstd_block_header(false, 1, 128 << 10, &mut f);
        f.push(b'a');
    }
    zstd_block_header(true, 0, 0, &mut f);
    f
}

/// `n` frames that each hold one empty raw block (9 bytes each).
pub fn zstd_empty_frames(n: usize) -> Vec<u8> {
    let mut f = Vec::new();
    for _ in 0..n.max(1) {
        f.extend_from_slice(&ZSTD_MAGIC);
        f.extend_from_slice(&[0x20, 0x00]); // single segment, content size 0 (1 byte)
        zstd_block_header(true, 0, 0, &mut f);
    }
    f
}

/// One frame of compressed blocks holding nothing (a raw empty literals section, no
/// sequences: 5 bytes each), each counted at 128 KiB by a bound from the block headers.
pub fn zstd_empty_compressed_blocks(len: usize) -> Vec<u8> {
    let mut f = zstd_header();
    while f.len() + 8 < len {
        zstd_block_header(false, 2, 2, &mut f);
        f.extend_from_slice(&[0x00, 0x00]); // raw literals of size 0; 0 sequences
    }
    zstd_block_header(true, 0, 0, &mut f);
    f
}

/// Many frames of ~100 bytes of text each, compressed alone at a high level, so every frame
/// carries Huffman and FSE tables the decoder must build.
pub fn zstd_table_frames(len: usize) -> Vec<u8> {
    let text: Vec<u8> = (0..200u32)
        .map(|i| b"etaoinshrdlucmfwypvbgkjqxz"[(i * i % 26) as usize])
        .collect();
    let frame = zstd::bulk::compress(&text, 19).unwrap();
    frame.repeat((len / frame.len()).max(1))
}
