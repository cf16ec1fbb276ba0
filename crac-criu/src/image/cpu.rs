//! CPU features: what an image's process may use, recorded at dump, checked at restore.
//!
//! A program, and the C library under it, choose code paths for the CPU they start on (Rust's
//! `is_x86_feature_detected!`, glibc's per-CPU string and math functions). Restored on a CPU
//! without one of those features, the process crashes later with an illegal instruction, far
//! from the cause. So the image records every instruction-set extension this CPU has and the
//! kernel enables, and a restore on a CPU that lacks any of them is refused, naming them
//! (what CRaC's `-XX:CPUFeatures` check does for the JVM).

/// The instruction-set extensions this CPU has and the operating system enables.
#[cfg(target_arch = "x86_64")]
pub fn host_features() -> Vec<&'static str> {
    macro_rules! detect {
        ($($name:tt),* $(,)?) => {{
            let mut v = Vec::new();
            $(if std::arch::is_x86_feature_detected!($name) { v.push($name); })*
            v
        }};
    }
    detect!(
        "sse",
        "sse2",
        "sse3",
        "ssse3",
        "sse4.1",
        "sse4.2",
        "sse4a",
        "popcnt",
        "lzcnt",
        "abm",
        "bmi1",
        "bmi2",
        "tbm",
        "fma",
        "f16c",
        "movbe",
        "adx",
        "aes",
        "pclmulqdq",
        "sha",
        "rdrand",
        "rdseed",
        "cmpxchg16b",
        "fxsr",
        "xsave",
        "xsaveopt",
        "xsavec",
        "xsaves",
        "rtm",
        "ermsb",
        "avx",
        "avx2",
        "avx512f",
        "avx512cd",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512ifma",
        "avx512vbmi",
        "avx512vbmi2",
        "avx512vnni",
        "avx512bitalg",
        "avx512vpopcntdq",
        "avx512bf16",
        "avx512vp2intersect",
        "avx512fp16",
        "gfni",
        "vaes",
        "vpclmulqdq",
    )
}

/// The instruction-set extensions this CPU has and the operating system enables.
#[cfg(target_arch = "aarch64")]
pub fn host_features() -> Vec<&'static str> {
    macro_rules! detect {
        ($($name:tt),* $(,)?) => {{
            let mut v = Vec::new();
            $(if std::arch::is_aarch64_feature_detected!($name) { v.push($name); })*
            v
        }};
    }
    detect!(
        "neon", "aes", "pmull", "sha2", "sha3", "crc", "lse", "lse2", "rcpc", "rcpc2", "dotprod",
        "fp16", "bf16", "i8mm", "sve", "sve2", "rdm", "jsconv", "fcma", "dit", "flagm", "ssbs",
        "sb", "paca", "pacg", "bti", "mte",
    )
}

/// Elsewhere nothing is recorded, so nothing is checked.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn host_features() -> Vec<&'static str> {
    Vec::new()
}

/// The recorded features `host` lacks (a name this build does not know counts as lacking:
/// the image was taken by a build that could see it).
pub fn missing<'a>(recorded: &'a [String], host: &[&str]) -> Vec<&'a str> {
    recorded
        .iter()
        .map(String::as_str)
        .filter(|f| !host.contains(f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_cpu_has_its_own_features_and_lacks_others() {
        let host = host_features();
        #[cfg(target_arch = "x86_64")]
        assert!(host.contains(&"sse2"), "{host:?}");
        let own: Vec<String> = host.iter().map(|s| (*s).to_owned()).collect();
        assert!(missing(&own, &host).is_empty());
        let more = [own.clone(), vec!["no-such-feature".to_owned()]].concat();
        assert_eq!(missing(&more, &host), vec!["no-such-feature"]);
    }
}
