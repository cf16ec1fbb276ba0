//! Calls about several items (topics, partitions, groups): each round asks about the items
//! still pending and answers per item; an item whose error is retriable (a moved leader or
//! controller, a topic not yet known everywhere) is asked again next round, the others are
//! settled. One failing item never fails the rest; when the call's time runs out, the items
//! still pending get the timeout, naming the last error they met.

use super::io::{Call, Io};
use super::{AdminError, PerItem};

/// What a round answered: per item, its outcome.
pub(crate) type Answers<K, T> = Vec<(K, Result<T, AdminError>)>;

/// Runs rounds until every item is settled or the call's time is up. `round` gets the pending
/// items; a whole-round error that is retriable (a lost connection) retries every pending
/// item, another settles them all with it. Items a round does not mention are settled as a
/// protocol error.
pub(crate) fn per_item<K, T>(
    io: &mut Io,
    call: &Call,
    items: Vec<K>,
    mut round: impl FnMut(&mut Io, &[K]) -> Result<Answers<K, T>, AdminError>,
) -> Result<PerItem<K, T>, AdminError>
where
    K: Ord + Clone + std::fmt::Debug,
{
    let mut out = PerItem::new();
    let mut pending = items;
    let outcome = io.retrying(call, |io: &mut Io| {
        let answers = match round(io, &pending) {
            Ok(a) => a,
            Err(e) if e.is_retriable() => return Err(e),
            Err(e) => {
                for k in pending.drain(..) {
                    out.insert(k, Err(e.clone()));
                }
                return Ok(());
            }
        };
        let mut retry = Vec::new();
        let mut last = None;
        for (k, r) in answers {
            if !pending.contains(&k) {
                continue;
            }
            match r {
                Err(e) if e.is_retriable() => {
                    retry.push(k);
                    last = Some(e);
                }
                r => {
                    out.insert(k, r);
                }
            }
        }
        for k in pending.drain(..) {
            if !retry.contains(&k) && !out.contains_key(&k) {
                let e = AdminError::Protocol {
                    operation: call.op,
                    reason: format!("the broker's answer left out {k:?}"),
                };
                out.insert(k, Err(e));
            }
        }
        pending = retry;
        last.filter(|_| !pending.is_empty()).map_or(Ok(()), Err)
    });
    match outcome {
        Ok(()) => Ok(out),
        Err(e @ AdminError::Closed { .. }) => Err(e),
        Err(e) => {
            for k in pending {
                out.insert(k, Err(e.clone()));
            }
            Ok(out)
        }
    }
}
