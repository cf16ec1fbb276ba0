//! Warm state of the producing service (`src/bin/kafka_service.rs`): what a real service
//! builds before it can answer, and what a checkpoint exists to keep.
//!
//! Two kinds, chosen by `SVC_WARM`:
//! - `catalog:N`: a product catalog of N items read from its source text (CSV, generated here
//!   deterministically in place of a file or a download), parsed into records, indexed by id
//!   and by name token, and turned into a small scoring model (per-token document
//!   frequencies, per-category price statistics). The costs are those of real warm state:
//!   parsing, hashing, many small allocations. Each record the service sends carries the
//!   catalog's answer for it, so the state is used, not just held.
//! - `fill:MB`: a table of MB MiB filled by a cheap mixing loop (the benches' "state of a
//!   given size"): about as fast to rebuild as to read back from an image.
//!
//! A third part, a cache filled from the cluster, lives in the service (it needs the
//! consumer): see `kafka_service.rs`.

use std::collections::HashMap;
use std::fmt::Write as _;

/// A product of the catalog.
#[derive(Debug, Clone)]
pub struct Item {
    /// Stock-keeping unit: the catalog's key.
    pub sku: u64,
    /// Display name (a few words).
    pub name: String,
    /// Index into [`Catalog::categories`].
    pub category: u16,
    /// Price in cents.
    pub price_cents: u64,
    /// Units in stock.
    pub stock: u32,
}

/// Price statistics of one category (part of the model).
#[derive(Debug, Clone, Default)]
pub struct CategoryStats {
    /// Items in the category.
    pub items: u64,
    /// Sum of prices, cents.
    pub price_sum: u64,
    /// Lowest and highest price, cents.
    pub price_min: u64,
    /// Highest price, cents.
    pub price_max: u64,
}

/// The parsed, indexed catalog and its model.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Every item, in source order.
    pub items: Vec<Item>,
    /// Category names.
    pub categories: Vec<String>,
    /// sku -> index into `items`.
    pub by_sku: HashMap<u64, u32>,
    /// Lower-case name token -> indexes of the items whose name has it.
    pub by_token: HashMap<String, Vec<u32>>,
    /// Per-category statistics.
    pub stats: Vec<CategoryStats>,
}

const WORDS: &[&str] = &[
    "alpine", "amber", "arc", "atlas", "aurora", "basalt", "beacon", "birch", "blaze", "bolt",
    "breeze", "canyon", "cedar", "cinder", "cobalt", "comet", "coral", "crest", "delta", "drift",
    "dune", "echo", "ember", "falcon", "fern", "fjord", "flint", "forge", "frost", "glacier",
    "granite", "harbor", "hazel", "horizon", "indigo", "iron", "jade", "juniper", "kestrel",
    "lagoon", "lark", "lumen", "maple", "meadow", "mesa", "mist", "nebula", "nova", "oak", "onyx",
    "orbit", "pebble", "pine", "prairie", "quartz", "quill", "raven", "reef", "ridge", "river",
    "sable", "sage", "shale", "sierra", "slate", "solstice", "spruce", "summit", "tide", "timber",
    "topaz", "tundra", "umber", "vale", "vertex", "willow", "zephyr",
];
const KINDS: &[&str] = &[
    "kettle", "lamp", "jacket", "boots", "tent", "mug", "backpack", "chair", "desk", "cable",
    "speaker", "watch", "knife", "stove", "blanket", "helmet", "glove", "scarf", "bottle",
    "router",
];
const CATEGORIES: &[&str] = &[
    "kitchen",
    "lighting",
    "apparel",
    "footwear",
    "outdoor",
    "office",
    "electronics",
    "tools",
    "home",
    "sports",
    "travel",
    "garden",
];

/// The source text of an `n`-item catalog: `sku,name,category,price,stock` lines. The same
/// text for the same `n`, so every run builds the same state.
pub fn catalog_source(n: u64) -> String {
    let mut s = String::with_capacity(n as usize * 64 + 64);
    s.push_str("sku,name,category,price,stock\n");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    for i in 0..n {
        let r = next();
        let (w1, w2, k) = (
            WORDS[(r % WORDS.len() as u64) as usize],
            WORDS[((r >> 8) % WORDS.len() as u64) as usize],
            KINDS[((r >> 16) % KINDS.len() as u64) as usize],
        );
        let cat = CATEGORIES[((r >> 24) % CATEGORIES.len() as u64) as usize];
        let price = 99 + (r >> 32) % 250_000;
        let stock = (r >> 50) % 5_000;
        let _ = writeln!(
            s,
            "{},{w1} {w2} {k} {},{cat},{}.{:02},{stock}",
            1_000_000 + i,
            i % 97,
            price / 100,
            price % 100
        );
    }
    s
}

/// Why a catalog line was refused.
#[derive(Debug)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "catalog line {}: {}", self.line, self.what)
    }
}

fn parse_price(s: &str) -> Option<u64> {
    let (units, cents) = s.split_once('.').unwrap_or((s, "0"));
    let cents: u64 = match cents.len() {
        1 => cents.parse::<u64>().ok()? * 10,
        2 => cents.parse().ok()?,
        _ => return None,
    };
    units
        .parse::<u64>()
        .ok()?
        .checked_mul(100)?
        .checked_add(cents)
}

impl Catalog {
    /// Parses the source text and builds the indexes and the model.
    pub fn parse(source: &str) -> Result<Catalog, ParseError> {
        let mut c = Catalog::default();
        let mut category_ix: HashMap<&str, u16> = HashMap::new();
        for (i, line) in source.lines().enumerate().skip(1) {
            let bad = |what: &str| ParseError {
                line: i + 1,
                what: what.to_owned(),
            };
            let mut f = line.split(',');
            let (Some(sku), Some(name), Some(cat), Some(price), Some(stock), None) =
                (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                return Err(bad("expected 5 fields"));
            };
            let n = u16::try_from(category_ix.len())
                .ok()
                .filter(|_| category_ix.len() < usize::from(u16::MAX))
                .ok_or_else(|| bad("more than 65535 categories"))?;
            let category = *category_ix.entry(cat).or_insert_with(|| {
                c.categories.push(cat.to_owned());
                n
            });
            c.items.push(Item {
                sku: sku.parse().map_err(|_| bad("sku is not a number"))?,
                name: name.to_owned(),
                category,
                price_cents: parse_price(price).ok_or_else(|| bad("bad price"))?,
                stock: stock.parse().map_err(|_| bad("stock is not a number"))?,
            });
        }
        c.index();
        Ok(c)
    }

    fn index(&mut self) {
        self.by_sku.reserve(self.items.len());
        self.stats = vec![CategoryStats::default(); self.categories.len()];
        for (ix, item) in self.items.iter().enumerate() {
            self.by_sku.insert(item.sku, ix as u32);
            for tok in item.name.split_whitespace() {
                self.by_token
                    .entry(tok.to_ascii_lowercase())
                    .or_default()
                    .push(ix as u32);
            }
            let st = &mut self.stats[item.category as usize];
            if st.items == 0 {
                st.price_min = item.price_cents;
            }
            st.items += 1;
            st.price_sum += item.price_cents;
            st.price_min = st.price_min.min(item.price_cents);
            st.price_max = st.price_max.max(item.price_cents);
        }
    }

    /// The catalog's answer for a request: the item at `seq` (round the catalog), and how
    /// its price compares with its category's mean, in per cent. `None` for an empty catalog.
    pub fn quote(&self, seq: u64) -> Option<(u64, i64)> {
        let sku = 1_000_000 + seq % self.items.len().max(1) as u64;
        let item = &self.items[*self.by_sku.get(&sku)? as usize];
        let st = &self.stats[item.category as usize];
        let mean = st.price_sum / st.items.max(1);
        Some((
            item.sku,
            (item.price_cents as i64 - mean as i64) * 100 / mean.max(1) as i64,
        ))
    }

    /// Items whose name has every word of `query` (the inverted index at work).
    pub fn search(&self, query: &str) -> Vec<u64> {
        let mut lists: Vec<&Vec<u32>> = Vec::new();
        for w in query.split_whitespace() {
            match self.by_token.get(&w.to_ascii_lowercase()) {
                Some(l) => lists.push(l),
                None => return Vec::new(),
            }
        }
        lists.sort_by_key(|l| l.len());
        let Some((first, rest)) = lists.split_first() else {
            return Vec::new();
        };
        first
            .iter()
            .filter(|ix| rest.iter().all(|l| l.binary_search(ix).is_ok()))
            .map(|&ix| self.items[ix as usize].sku)
            .collect()
    }

    /// A digest of everything built: equal digests, equal state.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = self.items.len() as u64;
        for it in &self.items {
            h = h.rotate_left(5) ^ it.sku ^ it.price_cents ^ u64::from(it.stock);
            h = h.rotate_left(5) ^ it.name.len() as u64;
        }
        let mut tokens: Vec<(&String, usize)> =
            self.by_token.iter().map(|(k, v)| (k, v.len())).collect();
        tokens.sort();
        for (k, n) in tokens {
            h = h.rotate_left(7) ^ k.len() as u64 ^ n as u64;
        }
        h ^ self.by_sku.len() as u64
    }
}

/// The warm state the service holds.
pub enum WarmState {
    /// A parsed, indexed catalog.
    Catalog(Catalog),
    /// A filled table.
    Fill(Vec<u64>),
}

impl WarmState {
    /// Builds the state `spec` names: `catalog:N` or `fill:MB`.
    pub fn build(spec: &str) -> Result<WarmState, String> {
        let bad = || format!("SVC_WARM={spec}: expected catalog:ITEMS or fill:MB");
        let (kind, n) = spec.split_once(':').ok_or_else(bad)?;
        let n: u64 = n.parse().map_err(|_| bad())?;
        match kind {
            "catalog" => Catalog::parse(&catalog_source(n))
                .map(WarmState::Catalog)
                .map_err(|e| e.to_string()),
            "fill" => Ok(WarmState::Fill(fill(n as usize))),
            _ => Err(bad()),
        }
    }

    /// A digest of the state (equal before the image and after the restore).
    pub fn digest(&self) -> u64 {
        match self {
            WarmState::Catalog(c) => c.digest(),
            WarmState::Fill(v) => v.iter().fold(0u64, |a, &b| a ^ b),
        }
    }

    /// The state's answer for request `seq`, as text for a record header.
    pub fn answer(&self, seq: u64) -> String {
        match self {
            WarmState::Catalog(c) => match c.quote(seq) {
                Some((sku, vs_mean)) => format!("{sku}:{vs_mean:+}%"),
                None => String::new(),
            },
            WarmState::Fill(v) if !v.is_empty() => format!("{:x}", v[seq as usize % v.len()]),
            WarmState::Fill(_) => String::new(),
        }
    }
}

/// A table of `mb` MiB: a cheap mixing loop per entry (16 rounds of xorshift).
pub fn fill(mb: usize) -> Vec<u64> {
    let n = mb * 1024 * 1024 / 8;
    let mut v = Vec::with_capacity(n);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..n {
        for _ in 0..16 {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
        }
        v.push(x.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_parses_indexes_and_answers() {
        let c = Catalog::parse(&catalog_source(5_000)).unwrap();
        assert_eq!(c.items.len(), 5_000);
        assert_eq!(c.by_sku.len(), 5_000);
        assert!(c.categories.len() <= CATEGORIES.len());
        let (sku, _) = c.quote(7).unwrap();
        assert_eq!(sku, 1_000_007);
        // Every item is found by the words of its own name.
        for it in c.items.iter().step_by(97) {
            assert!(c.search(&it.name).contains(&it.sku), "{}", it.name);
        }
        assert!(c.search("no-such-word").is_empty());
        // The same source, the same state.
        assert_eq!(
            c.digest(),
            Catalog::parse(&catalog_source(5_000)).unwrap().digest()
        );
    }

    #[test]
    fn bad_source_lines_are_refused_with_their_line() {
        for (text, what) in [
            ("h\n1,a,b,2.00\n", "expected 5 fields"),
            ("h\nx,a,b,2.00,1\n", "sku"),
            ("h\n1,a,b,2.001,1\n", "price"),
            ("h\n1,a,b,99999999999999999999.00,1\n", "price"),
        ] {
            let e = Catalog::parse(text).unwrap_err();
            assert_eq!(e.line, 2);
            assert!(e.what.contains(what), "{e}");
        }
        assert!(WarmState::build("catalog:x").is_err());
        assert!(WarmState::build("bogus:1").is_err());
    }
}
