//! How many workers a run may start on PostgreSQL: no more than the server admits. A run holds
//! `--concurrency` connections plus one; asked for more than the server has free, sqlx would
//! open connection after connection into "too many clients" (53300), and while the server is
//! full every other login is refused with it, the consumers' included. So the run reads the
//! server's slots first and caps its workers, leaving a margin for everyone else, and says so
//! (contract, section 9).

use crate::store::ConnectionSlots;

/// The slots a run leaves free for other logins: a tenth of `max_connections`, at least 2.
pub fn margin(max_connections: i64) -> i64 {
    (max_connections / 10).max(2)
}

/// The workers the run starts, and why fewer than asked when it is fewer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capped {
    /// Workers to start (at least 1).
    pub workers: usize,
    /// What a person is told when `workers` is below the request.
    pub why: Option<String>,
}

/// Caps `requested` workers to what `slots` admit. The run's first connection, which read
/// `slots`, is among those in use and serves the page reader; each worker needs one more.
pub fn cap(requested: usize, slots: &ConnectionSlots) -> Capped {
    let server_free =
        slots.max_connections - slots.reserved - slots.in_use - margin(slots.max_connections);
    let role_free = if slots.role_limit < 0 {
        i64::MAX
    } else {
        slots.role_limit - slots.role_in_use
    };
    let free = server_free.min(role_free);
    let wanted = i64::try_from(requested).unwrap_or(i64::MAX);
    if wanted <= free {
        return Capped {
            workers: requested,
            why: None,
        };
    }
    let workers = usize::try_from(free.max(1)).unwrap_or(1);
    let limit = if role_free < server_free {
        format!(
            "the login's CONNECTION LIMIT is {} and it has {} sessions open",
            slots.role_limit, slots.role_in_use
        )
    } else {
        format!(
            "the server admits {} connections, {} of them reserved, {} in use, and a run leaves {} \
             free for other logins",
            slots.max_connections,
            slots.reserved,
            slots.in_use,
            margin(slots.max_connections)
        )
    };
    Capped {
        workers,
        why: Some(format!(
            "--concurrency {requested} asks for more connections than the server has free: \
             {limit}; running {workers} worker{} instead (raise max_connections or the limit, \
             or lower --concurrency)",
            if workers == 1 { "" } else { "s" }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(max: i64, reserved: i64, in_use: i64) -> ConnectionSlots {
        ConnectionSlots {
            max_connections: max,
            reserved,
            in_use,
            role_limit: -1,
            role_in_use: 1,
        }
    }

    #[test]
    fn a_request_the_server_admits_stands() {
        assert_eq!(
            cap(4, &slots(100, 3, 10)),
            Capped {
                workers: 4,
                why: None
            }
        );
    }

    #[test]
    fn a_request_past_the_free_slots_is_capped_with_a_margin_and_said() {
        // 200 - 3 reserved - 12 in use - 20 margin = 165.
        let c = cap(256, &slots(200, 3, 12));
        assert_eq!(c.workers, 165);
        let why = c.why.unwrap();
        assert!(
            why.contains("--concurrency 256") && why.contains("165 workers"),
            "{why}"
        );
        // A full server still gets one worker (its connect then waits or fails as any would).
        assert_eq!(cap(8, &slots(20, 3, 20)).workers, 1);
    }

    #[test]
    fn the_logins_own_limit_caps_too() {
        let mut s = slots(1000, 3, 10);
        s.role_limit = 6;
        s.role_in_use = 2;
        let c = cap(32, &s);
        assert_eq!(c.workers, 4);
        assert!(c.why.unwrap().contains("CONNECTION LIMIT is 6"));
    }
}
