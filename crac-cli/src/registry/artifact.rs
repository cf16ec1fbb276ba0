//! The OCI artifact of an image: what `crac push` writes and `crac pull` accepts.
//!
//! An OCI image manifest with our `artifactType`. Its annotations carry what lets a host refuse
//! the image before downloading pages (CPU features, the executable and its build id, kernel,
//! CRIU version, source host, creation time). Its config blob is the layout: the image's files
//! with their sizes, and for every layer the pieces of files it decompresses to, in order. Its
//! layers are zstd streams: one of the small files (CRIU's metadata images, ours, the
//! manifest), then the page files cut into pieces of at most a chunk each, so that several
//! download and decompress at once. Everything a puller acts on is checked here first: names,
//! sizes, that the pieces tile every file exactly once, and the bounds of each number.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The manifest's `artifactType`.
pub const ARTIFACT_TYPE: &str = "application/vnd.crac-rs.image.v1";
/// The config blob's media type.
pub const CONFIG_TYPE: &str = "application/vnd.crac-rs.image.config.v1+json";
/// The layer holding the small files.
pub const FILES_LAYER_TYPE: &str = "application/vnd.crac-rs.image.files.v1+zstd";
/// A layer holding one piece of a page file.
pub const PAGES_LAYER_TYPE: &str = "application/vnd.crac-rs.image.pages.v1+zstd";
/// OCI's image manifest media type.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// Annotation keys of the manifest.
pub mod key {
    /// OCI's creation time (RFC 3339).
    pub const CREATED: &str = "org.opencontainers.image.created";
    /// The CPU features the image's process may use, comma-separated.
    pub const CPU_FEATURES: &str = "dev.crac-rs.cpu.features";
    /// The CPU architecture (`uname -m`).
    pub const ARCH: &str = "dev.crac-rs.cpu.arch";
    /// The executable's path in the image.
    pub const EXECUTABLE: &str = "dev.crac-rs.executable";
    /// The executable's build id.
    pub const BUILD_ID: &str = "dev.crac-rs.executable.build-id";
    /// The kernel the image was taken on.
    pub const KERNEL: &str = "dev.crac-rs.kernel";
    /// The CRIU version that took it.
    pub const CRIU_VERSION: &str = "dev.crac-rs.criu.version";
    /// The host it was taken on.
    pub const SOURCE_HOST: &str = "dev.crac-rs.source.host";
    /// Total bytes of the image's files.
    pub const SIZE: &str = "dev.crac-rs.image.size";
}

/// The most files an image may have (CRIU writes tens; a process with many threads, hundreds).
pub const MAX_FILES: usize = 4096;
/// The most layers.
pub const MAX_LAYERS: usize = 16384;
/// The most bytes of small files (the files layer, decompressed).
pub const MAX_SMALL_BYTES: u64 = 256 << 20;
/// The largest manifest or config blob read.
pub const MAX_DOC: usize = 4 << 20;
/// The longest file name.
const MAX_NAME: usize = 255;

/// One file of the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its name in the image directory.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A run of bytes of one file that a layer decompresses to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// Index into [`Layout::files`].
    pub file: usize,
    /// Where in the file it starts.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

/// The config blob: the image's files, and what each layer holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// `crac-rs image layout 1`.
    pub format: String,
    /// Every file, each once.
    pub files: Vec<FileEntry>,
    /// For each layer of the manifest, in order: the pieces it decompresses to, in order.
    pub layers: Vec<Vec<Piece>>,
}

/// [`Layout::format`] of this version.
pub const LAYOUT_FORMAT: &str = "crac-rs image layout 1";

impl Layout {
    /// Bytes a layer decompresses to.
    pub fn layer_len(&self, layer: usize) -> u64 {
        self.layers[layer].iter().map(|p| p.len).sum()
    }

    /// Total bytes of all files.
    pub fn total(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Checks a layout read from a registry: the format, every name a plain file name of an
    /// image, no name twice, sizes within `u64`, and pieces that cover every byte of every
    /// file exactly once; `layers` must be the manifest's layer count.
    pub fn check(&self, layers: usize) -> Result<(), String> {
        if self.format != LAYOUT_FORMAT {
            return Err(format!(
                "layout format `{}`, expected `{LAYOUT_FORMAT}`",
                self.format
            ));
        }
        if self.files.len() > MAX_FILES || self.layers.len() > MAX_LAYERS {
            return Err(format!(
                "{} files in {} layers: more than an image has",
                self.files.len(),
                self.layers.len()
            ));
        }
        if self.layers.len() != layers {
            return Err(format!(
                "the layout names {} layers, the manifest has {layers}",
                self.layers.len()
            ));
        }
        let mut seen = BTreeMap::new();
        for (i, f) in self.files.iter().enumerate() {
            check_name(&f.name)?;
            if seen.insert(f.name.as_str(), i).is_some() {
                return Err(format!("file {} named twice", f.name));
            }
        }
        self.files
            .iter()
            .try_fold(0u64, |a, f| a.checked_add(f.size))
            .ok_or("file sizes overflow")?;
        self.check_tiling()
    }

    /// Every byte of every file in exactly one piece.
    fn check_tiling(&self) -> Result<(), String> {
        let mut runs: Vec<(usize, u64, u64)> = Vec::new();
        for p in self.layers.iter().flatten() {
            let f = self
                .files
                .get(p.file)
                .ok_or_else(|| format!("a piece of file #{}, which is not listed", p.file))?;
            let end = p
                .offset
                .checked_add(p.len)
                .filter(|e| *e <= f.size)
                .ok_or_else(|| format!("a piece past the end of {}", f.name))?;
            if p.len == 0 {
                return Err(format!("an empty piece of {}", f.name));
            }
            runs.push((p.file, p.offset, end));
        }
        runs.sort_unstable();
        let mut at = vec![0u64; self.files.len()];
        for (file, start, end) in runs {
            if start != at[file] {
                return Err(format!(
                    "{}: bytes from {} are {}",
                    self.files[file].name,
                    at[file].min(start),
                    if start < at[file] {
                        "in two pieces"
                    } else {
                        "in none"
                    }
                ));
            }
            at[file] = end;
        }
        for (f, end) in self.files.iter().zip(at) {
            if end != f.size {
                return Err(format!("{}: bytes from {end} are in no piece", f.name));
            }
        }
        Ok(())
    }
}

/// A name an image file may have: a plain name (no `/`, not `.`/`..`), printable ASCII.
pub fn check_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
    if plain {
        Ok(())
    } else {
        Err(format!("file name {name:?} is not one an image has"))
    }
}

/// Builds the layout of `files` (name, size; the page files marked): the small files in one
/// layer, each page file in pieces of at most `chunk` bytes, each piece a layer.
pub fn plan(files: &[(String, u64, bool)], chunk: u64) -> Layout {
    let chunk = chunk.max(1);
    let mut layers = vec![Vec::new()];
    for (i, (_, size, pages)) in files.iter().enumerate() {
        if !*pages {
            if *size > 0 {
                layers[0].push(Piece {
                    file: i,
                    offset: 0,
                    len: *size,
                });
            }
            continue;
        }
        let mut offset = 0;
        while offset < *size {
            let len = chunk.min(size - offset);
            layers.push(vec![Piece {
                file: i,
                offset,
                len,
            }]);
            offset += len;
        }
    }
    Layout {
        format: LAYOUT_FORMAT.to_owned(),
        files: files
            .iter()
            .map(|(name, size, _)| FileEntry {
                name: name.clone(),
                size: *size,
            })
            .collect(),
        layers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<(String, u64, bool)> {
        vec![
            ("core-1.img".into(), 300, false),
            ("empty.img".into(), 0, false),
            ("pages-1.img".into(), 10_000, true),
            ("pages-2.img".into(), 4096, true),
        ]
    }

    #[test]
    fn plan_cuts_pages_into_chunks_and_checks() {
        let l = plan(&files(), 4096);
        // files layer, 3 pieces of pages-1, 1 of pages-2
        assert_eq!(l.layers.len(), 5);
        assert_eq!(l.layer_len(0), 300);
        assert_eq!(l.layer_len(3), 10_000 - 8192);
        assert_eq!(l.total(), 300 + 10_000 + 4096);
        l.check(5).unwrap();
        assert!(l.check(4).unwrap_err().contains("manifest has 4"));
    }

    #[test]
    fn refuses_layouts_that_do_not_tile() {
        let good = plan(&files(), 4096);
        let mut gap = good.clone();
        gap.layers[2][0].offset += 1;
        assert!(gap.check(5).is_err());
        let mut twice = good.clone();
        twice.layers[2][0].len += 1;
        assert!(twice.check(5).unwrap_err().contains("two pieces"));
        let mut short = good.clone();
        short.files[3].size += 1;
        assert!(short.check(5).unwrap_err().contains("no piece"));
        let mut past = good.clone();
        past.layers[4][0].len = u64::MAX;
        assert!(past.check(5).unwrap_err().contains("past the end"));
        let mut nofile = good.clone();
        nofile.layers[1][0].file = 99;
        assert!(nofile.check(5).is_err());
        let mut dup = good.clone();
        dup.files[1].name = "core-1.img".into();
        assert!(dup.check(5).unwrap_err().contains("twice"));
        let mut fmt = good;
        fmt.format = "x".into();
        assert!(fmt.check(5).is_err());
    }

    /// Hostile layouts: 20,000 mutations of a valid one (bytes flipped, numbers changed, parts
    /// cut), each parsed and checked within a time budget: none panics, none takes long, and
    /// what is accepted still tiles its files.
    #[test]
    fn mutated_layouts_are_refused_or_still_tile_their_files() {
        let good = serde_json::to_vec(&plan(&files(), 4096)).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let started = std::time::Instant::now();
        let mut accepted = 0;
        for _ in 0..20_000 {
            let mut doc = good.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % doc.len() as u64) as usize;
                match next() % 4 {
                    0 => doc[at] = b"0123456789,:[]{}\"-"[(next() % 17) as usize],
                    1 => doc[at] ^= 1 << (next() % 8),
                    2 => doc.truncate(at),
                    _ => doc
                        .splice(at..at, b"99999999999999999999".iter().copied())
                        .for_each(drop),
                }
                if doc.is_empty() {
                    break;
                }
            }
            let t = std::time::Instant::now();
            if let Ok(l) = serde_json::from_slice::<Layout>(&doc)
                && l.check(l.layers.len().min(MAX_LAYERS)).is_ok()
            {
                accepted += 1;
                let per_file: u64 = l.layers.iter().flatten().map(|p| p.len).sum();
                assert_eq!(
                    per_file,
                    l.total(),
                    "an accepted layout covers every byte once"
                );
            }
            assert!(
                t.elapsed() < std::time::Duration::from_millis(50),
                "one check took long"
            );
        }
        assert!(
            accepted > 0,
            "some mutations keep a valid layout (digits changed in place)"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }

    #[test]
    fn names_are_plain() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "a b",
            "a\nb",
            &"x".repeat(256),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["pages-1.img", "crac-image.txt", "core-12.img"] {
            check_name(good).unwrap();
        }
    }
}
