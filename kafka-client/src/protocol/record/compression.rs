//! Compression codecs of a record batch (attribute bits 0-2).

use std::fmt;
use std::str::FromStr;

/// The codec of a batch (`compression.type`). `BatchWriter::seal` compresses the records
/// section with it, the batch decoder inflates it (bounded); the codecs themselves are in
/// `protocol::compression`.
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

    /// Whether this build can encode and decode it (every codec, see
    /// `protocol::compression`).
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
