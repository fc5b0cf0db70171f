//! Idle keep-alive connections held without a task.
//!
//! A plain HTTP/1.1 connection that has waited [`PARK_AFTER`] for its next request is
//! parked: its socket leaves tokio (no task, no timer, no reactor registration, each
//! of which is a few hundred bytes) for an epoll set that belongs to its accept loop,
//! and what it needs to go on (the socket, the peer, its places in the connection
//! counts, the requests it has made) waits in a slab. When the client sends its next
//! request, or closes, the accept loop gives the connection a task again; when the
//! idle timeout passes first, the connection is closed, as a waiting task would close
//! it. This is how nginx holds tens of thousands of keep-alive clients in a few hundred
//! bytes each: its connections wait in epoll, not in a coroutine.
//!
//! A new client that needs the slot of an idle connection (`--max-connections`) closes
//! a parked one as it would tell a waiting task to close ([`ParkedConnections`]). At
//! shutdown the lot closes and hands back what it holds ([`Parking::release`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::future::OptionFuture;
use rustix::event::epoll;
use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::serve::per_ip::PerIpSlot;
use crate::serve::shared::{ConnectionSlot, ParkedConnections, Shared};

/// How long a keep-alive connection waits for its next request in its task before it
/// is parked. Clients that send again sooner (a page's resources, a benchmark's
/// requests) keep their task and pay nothing for parking; a connection idle for
/// longer costs the syscalls of parking and waking once per pause.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

/// Events taken from the epoll set per wake-up.
const EVENTS: usize = 256;

/// What a parked connection needs to be served again: its socket `S` (out of tokio's
/// reactor while parked) and the rest.
#[derive(Debug)]
pub(crate) struct Parked<S = std::net::TcpStream> {
    pub stream: S,
    pub peer: SocketAddr,
    pub slot: ConnectionSlot,
    pub peer_slot: PerIpSlot,
    /// Requests answered on the connection.
    pub served: u64,
}

impl<S> Parked<S> {
    /// The same connection with its socket turned into a `T` by `into`, or dropped
    /// (closed) when that fails.
    pub(crate) fn try_map_stream<T, E>(
        self,
        into: impl FnOnce(S) -> Result<T, E>,
    ) -> Result<Parked<T>, E> {
        Ok(Parked {
            stream: into(self.stream)?,
            peer: self.peer,
            slot: self.slot,
            peer_slot: self.peer_slot,
            served: self.served,
        })
    }
}

/// The parked connections of one accept loop.
#[derive(Debug)]
pub(crate) struct Parking {
    /// The epoll set of the parked sockets, itself registered with tokio.
    epoll: AsyncFd<OwnedFd>,
    lot: Mutex<Lot>,
    /// Told when a connection is parked with a deadline earlier than any before it.
    earlier_deadline: Notify,
}

#[derive(Debug, Default)]
struct Lot {
    entries: Slab<Entry>,
    /// Each entry's deadline with its ticket, earliest first. An entry that woke or
    /// was closed leaves its deadline behind, skipped when reached; such leftovers are
    /// dropped when they outnumber the entries.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// When each entry was parked, with its ticket, oldest first (the order they came
    /// in): which one a new client closes at `--max-connections`. Leftovers as above.
    ages: VecDeque<(Instant, u64)>,
    /// Told apart: an entry's ticket is its key and the generation it was parked in,
    /// so that an event or a deadline for a connection that left never touches the
    /// next one in its place.
    generation: u32,
    /// At shutdown: nothing is parked any more.
    closed: bool,
}

#[derive(Debug)]
struct Entry {
    parked: Parked,
    ticket: u64,
}

/// The slab key within a ticket.
fn key_of(ticket: u64) -> usize {
    (ticket & u64::from(u32::MAX)) as usize
}

impl Parking {
    /// An empty lot with an epoll set of its own, within a tokio runtime; registered
    /// with `shared`, whose new clients may close its oldest connection to make room.
    pub(crate) fn new(shared: &Shared) -> io::Result<Arc<Parking>> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // SAFETY: `epoll` is an open descriptor that the `AsyncFd` owns from here on;
        // nothing else closes or replaces it, and `OwnedFd::as_raw_fd` always returns it.
        let epoll = unsafe { AsyncFd::register_with_interest(epoll, Interest::READABLE) }
            .map_err(io::Error::from)?;
        let parking = Arc::new(Parking {
            epoll,
            lot: Mutex::default(),
            earlier_deadline: Notify::new(),
        });
        let lot: Arc<dyn ParkedConnections> = parking.clone();
        shared.add_parking_lot(Arc::downgrade(&lot));
        Ok(parking)
    }

    fn lock(&self) -> MutexGuard<'_, Lot> {
        self.lot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `parked` until its client sends or closes, or until `deadline` (its idle
    /// timeout). Hands it back when the lot is closed (shutdown) or the socket cannot
    /// join the epoll set.
    pub(crate) fn park(&self, parked: Parked, deadline: Instant) -> Result<(), Parked> {
        let mut lot = self.lock();
        if lot.closed {
            return Err(parked);
        }
        lot.generation = lot.generation.wrapping_add(1);
        let ticket = (u64::from(lot.generation) << 32) | lot.entries.vacant_key() as u64;
        let interest = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        let data = epoll::EventData::new_u64(ticket);
        if let Err(error) = epoll::add(self.epoll.get_ref(), &parked.stream, data, interest) {
            tracing::debug!(peer = %parked.peer, %error, "cannot park an idle connection");
            return Err(parked);
        }
        parked.slot.count_parked(true);
        lot.entries.insert(Entry { parked, ticket });
        lot.ages.push_back((Instant::now(), ticket));
        let earliest = lot
            .deadlines
            .peek()
            .is_none_or(|Reverse((first, _))| deadline < *first);
        lot.deadlines.push(Reverse((deadline, ticket)));
        drop(lot);
        if earliest {
            self.earlier_deadline.notify_one();
        }
        Ok(())
    }

    /// The entry parked under `ticket`, out of the lot and of the epoll set (its
    /// socket lives on).
    fn take(&self, ticket: u64) -> Option<Parked> {
        let parked = self.lock().remove(ticket)?;
        let _ = epoll::delete(self.epoll.get_ref(), &parked.stream);
        Some(parked)
    }

    /// Until `shutdown`: gives `wake` each parked connection whose client sent or
    /// closed, and closes those whose deadline passed.
    pub(crate) async fn drive(&self, shutdown: &CancellationToken, mut wake: impl FnMut(Parked)) {
        let mut events = Vec::with_capacity(EVENTS);
        loop {
            let next = self.lock().deadlines.peek().map(|Reverse((at, _))| *at);
            let expiry = OptionFuture::from(next.map(|at| tokio::time::sleep_until(at.into())));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.earlier_deadline.notified() => {}
                Some(()) = expiry => self.expire(Instant::now()),
                ready = self.epoll.readable() => {
                    let Ok(mut ready) = ready else {
                        // Only when the runtime shuts down.
                        return;
                    };
                    events.clear();
                    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
                    let buffer = rustix::buffer::spare_capacity(&mut events);
                    match epoll::wait(self.epoll.get_ref(), buffer, Some(&zero)) {
                        Ok(n) if n == EVENTS => {}
                        Ok(_) => ready.clear_ready(),
                        Err(rustix::io::Errno::INTR) => {}
                        Err(error) => {
                            tracing::warn!(%error, "epoll_wait on the parked connections failed");
                            ready.clear_ready();
                        }
                    }
                    for event in &events {
                        if let Some(parked) = self.take(event.data.u64()) {
                            wake(parked);
                        }
                    }
                }
            }
        }
    }

    /// Closes the connections whose deadline is `now` or past.
    fn expire(&self, now: Instant) {
        let mut expired = Vec::new();
        let mut lot = self.lock();
        while let Some(&Reverse((at, ticket))) = lot.deadlines.peek() {
            if at > now {
                break;
            }
            lot.deadlines.pop();
            expired.extend(lot.remove(ticket));
        }
        drop(lot);
        // Dropped out of the lock: each socket closes, which takes it out of the epoll
        // set, and gives its slots back.
        drop(expired);
    }

    /// Closes the lot and hands back every connection in it, out of the epoll set: at
    /// shutdown, where each is closed, or served once more after a hand-over to a new
    /// process (a request may be on its way).
    pub(crate) fn release(&self) -> Vec<Parked> {
        let entries = {
            let mut lot = self.lock();
            lot.closed = true;
            lot.deadlines.clear();
            lot.ages.clear();
            std::mem::take(&mut lot.entries)
        };
        entries
            .into_iter()
            .map(|(_, entry)| {
                let _ = epoll::delete(self.epoll.get_ref(), &entry.parked.stream);
                entry.parked.slot.count_parked(false);
                entry.parked
            })
            .collect()
    }
}

impl ParkedConnections for Parking {
    fn oldest(&self) -> Option<Instant> {
        self.lock().oldest().map(|(since, _)| since)
    }

    fn close_oldest(&self) -> bool {
        let mut lot = self.lock();
        let closed = lot.oldest().and_then(|(_, ticket)| lot.remove(ticket));
        drop(lot);
        // Dropped here: the socket closes, the slots are given back.
        closed.is_some()
    }
}

impl Lot {
    fn is_parked(&self, ticket: u64) -> bool {
        self.entries
            .get(key_of(ticket))
            .is_some_and(|entry| entry.ticket == ticket)
    }

    /// The entry parked under `ticket`, out of the lot.
    fn remove(&mut self, ticket: u64) -> Option<Parked> {
        if !self.is_parked(ticket) {
            return None;
        }
        let entry = self.entries.remove(key_of(ticket));
        entry.parked.slot.count_parked(false);
        self.compact();
        Some(entry.parked)
    }

    /// The oldest entry's parking time and ticket, after dropping the leftovers ahead
    /// of it.
    fn oldest(&mut self) -> Option<(Instant, u64)> {
        while let Some(&(since, ticket)) = self.ages.front() {
            if self.is_parked(ticket) {
                return Some((since, ticket));
            }
            self.ages.pop_front();
        }
        None
    }

    /// Drops the deadlines and ages of entries that woke or were closed once they
    /// outnumber the entries: each costs 24 bytes, and a client that pauses often
    /// would leave one of each per pause until its idle timeout.
    fn compact(&mut self) {
        let most = 2 * self.entries.len() + 64;
        if self.deadlines.len() > most || self.ages.len() > most {
            let entries = &self.entries;
            let parked = |ticket: u64| {
                entries
                    .get(key_of(ticket))
                    .is_some_and(|entry| entry.ticket == ticket)
            };
            self.deadlines
                .retain(|Reverse((_, ticket))| parked(*ticket));
            self.ages.retain(|(_, ticket)| parked(*ticket));
        }
    }
}
