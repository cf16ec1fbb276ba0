//! How many requests the broker serves at once: a share per user and a total, so that one
//! user can never take another's turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many requests are served at once: per user and in all.
#[derive(Debug)]
pub(super) struct Limits {
    /// Requests of one user at once.
    pub(super) per_user: usize,
    /// Requests at once in all.
    pub(super) total: usize,
    in_flight: Mutex<HashMap<u32, usize>>,
}

/// A request admitted within its user's share; leaving it gives the share back.
#[derive(Debug)]
pub(super) struct Admitted {
    limits: Arc<Limits>,
    uid: u32,
}

impl Limits {
    /// At most `per_user` requests of one user and `total` in all.
    pub(super) fn new(per_user: usize, total: usize) -> Arc<Limits> {
        Arc::new(Limits {
            per_user,
            total,
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, usize>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a request of `uid`, or says why not.
    pub(super) fn admit(self: &Arc<Self>, uid: u32) -> Result<Admitted, String> {
        let mut m = self.lock();
        let all: usize = m.values().sum();
        let mine = m.get(&uid).copied().unwrap_or(0);
        if mine >= self.per_user {
            return Err(format!(
                "the broker is busy with {mine} requests of uid {uid} (at most {} at once per \
                 user); try again",
                self.per_user
            ));
        }
        if all >= self.total {
            return Err(format!(
                "the broker is busy with {all} requests (at most {}); try again",
                self.total
            ));
        }
        *m.entry(uid).or_insert(0) += 1;
        Ok(Admitted {
            limits: self.clone(),
            uid,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut m = self.limits.lock();
        if let Some(n) = m.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_beyond_its_share_is_refused_and_others_are_not() {
        let l = Limits::new(2, 3);
        let a1 = l.admit(1000).unwrap();
        let _a2 = l.admit(1000).unwrap();
        let e = l.admit(1000).unwrap_err();
        assert!(e.contains("2 requests of uid 1000"), "{e}");
        let _b1 = l.admit(1001).unwrap();
        let e = l.admit(1002).unwrap_err();
        assert!(e.contains("at most 3"), "{e}");
        drop(a1);
        let _c = l.admit(1002).unwrap();
        assert!(l.admit(1000).is_err(), "the total is taken again");
    }
}
