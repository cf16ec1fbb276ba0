//! Calls about several items (topics, partitions, groups): each round asks about the items
//! still pending and answers per item; an item whose error is retriable (a moved leader or
//! controller, a topic not yet known everywhere) is asked again next round, the others are
//! settled. One failing item never fails the rest; when the call's time runs out, the items
//! still pending get the timeout, naming the last error they met.

use super::io::{Call, Io};
use super::offsets::by_leader;
use super::{AdminError, PerItem};
use crate::consumer::TopicPartition;
use crate::protocol::Request;

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

/// One round of a call about partitions, at their leaders: looks the leaders up, sends each
/// leader one request for its partitions (`request`), and turns each answer into per-partition
/// results (`results`); a leader that did not answer fails its partitions with why.
pub(crate) fn at_leaders<R: Request, T>(
    io: &mut Io,
    call: &Call,
    pending: &[TopicPartition],
    request: impl Fn(&[TopicPartition]) -> R,
    results: impl Fn(R::Response) -> Answers<TopicPartition, T>,
) -> Result<Answers<TopicPartition, T>, AdminError> {
    let (by_leader, mut answers) = by_leader(io, call, pending)?;
    let requests = by_leader
        .iter()
        .map(|(node, tps)| (*node, request(tps)))
        .collect();
    for ((_, resp), tps) in io
        .fan_out(call, requests)
        .into_iter()
        .zip(by_leader.values())
    {
        match resp {
            Ok(r) => answers.extend(results(r)),
            Err(e) => answers.extend(tps.iter().map(|tp| (tp.clone(), Err(e.clone())))),
        }
    }
    Ok(answers)
}

/// Asks every broker the same (listings each broker makes of what it coordinates): their
/// answers, or the first error (a listing short of a broker would be silently short).
pub(crate) fn at_every_broker<R: Request + Clone>(
    io: &mut Io,
    call: &Call,
    req: &R,
) -> Result<Vec<R::Response>, AdminError> {
    let brokers = io.brokers(call)?;
    let requests = brokers.iter().map(|b| (*b, req.clone())).collect();
    io.fan_out(call, requests)
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}
