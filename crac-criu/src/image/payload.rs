//! The restore payload: what `crac restore` hands the restored process through the pipe the
//! image recorded (the restorer's `--env` values and the moment the restore started). Both
//! sides of the image meet here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// First record of what the restorer sends through the configuration pipe.
pub(crate) const RESTORE_PAYLOAD_MAGIC: &str = "crac-restore 1";

/// Parses the configuration payload (see [`encode_restore_payload`]).
pub fn parse_restore_payload(data: &[u8]) -> (Vec<(String, String)>, Option<SystemTime>) {
    let text = String::from_utf8_lossy(data);
    let mut recs = text.split('\0');
    if recs.next() != Some(RESTORE_PAYLOAD_MAGIC) {
        return (Vec::new(), None);
    }
    let mut env = Vec::new();
    let mut started = None;
    for r in recs {
        if let Some(ns) = r.strip_prefix("started_ns=") {
            started = ns
                .parse::<u64>()
                .ok()
                .map(|ns| UNIX_EPOCH + Duration::from_nanos(ns));
        } else if let Some(kv) = r.strip_prefix("env=")
            && let Some((k, v)) = kv.split_once('=')
        {
            env.push((k.to_owned(), v.to_owned()));
        }
    }
    (env, started)
}

/// Encodes the configuration payload a restorer writes into the restored process's pipe.
pub fn encode_restore_payload(env: &[(String, String)], started: SystemTime) -> Vec<u8> {
    let mut s = String::from(RESTORE_PAYLOAD_MAGIC);
    let ns = started
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    s.push_str(&format!("\0started_ns={ns}"));
    for (k, v) in env {
        s.push_str(&format!("\0env={k}={v}"));
    }
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trip() {
        let t = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let env = vec![
            ("A".to_owned(), "1".to_owned()),
            ("B".to_owned(), "x=y".to_owned()),
        ];
        let (e, s) = parse_restore_payload(&encode_restore_payload(&env, t));
        assert_eq!(e, env);
        assert_eq!(s, Some(t));
        assert_eq!(parse_restore_payload(b""), (Vec::new(), None));
    }
}
