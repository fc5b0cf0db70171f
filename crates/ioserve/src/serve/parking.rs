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
use std::collections::BinaryHeap;
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
use crate::serve::shared::{ConnectionSlot, IdleKey, ParkedConnections};

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
    /// was closed leaves its deadline behind, skipped when reached; the heap is
    /// rebuilt when such deadlines outnumber the entries.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
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
    deadline: Instant,
    /// Its place among the idle connections that a new client may close.
    idle_key: IdleKey,
}

impl Parking {
    /// An empty lot with an epoll set of its own; within a tokio runtime.
    pub(crate) fn new() -> io::Result<Arc<Parking>> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // SAFETY: `epoll` is an open descriptor that the `AsyncFd` owns from here on;
        // nothing else closes or replaces it, and `OwnedFd::as_raw_fd` always returns it.
        let epoll = unsafe { AsyncFd::register_with_interest(epoll, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Arc::new(Parking {
            epoll,
            lot: Mutex::default(),
            earlier_deadline: Notify::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Lot> {
        self.lot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `parked` until its client sends or closes, or until `deadline` (its idle
    /// timeout). Hands it back when the lot is closed (shutdown) or the socket cannot
    /// join the epoll set.
    pub(crate) fn park(self: &Arc<Self>, parked: Parked, deadline: Instant) -> Result<(), Parked> {
        let mut lot = self.lock();
        if lot.closed {
            return Err(parked);
        }
        lot.generation = lot.generation.wrapping_add(1);
        let key = lot.entries.vacant_key();
        let ticket = (u64::from(lot.generation) << 32) | key as u64;
        let interest = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        let data = epoll::EventData::new_u64(ticket);
        if let Err(error) = epoll::add(self.epoll.get_ref(), &parked.stream, data, interest) {
            tracing::debug!(peer = %parked.peer, %error, "cannot park an idle connection");
            return Err(parked);
        }
        let lot_of = Arc::clone(self) as Arc<dyn ParkedConnections>;
        let idle_key = parked.slot.park(lot_of, ticket);
        lot.entries.insert(Entry {
            parked,
            ticket,
            deadline,
            idle_key,
        });
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

    /// The entry parked under `ticket`, out of the lot (and of the epoll set when
    /// `still_open`, since its socket lives on).
    fn take(&self, ticket: u64, still_open: bool) -> Option<Parked> {
        let mut lot = self.lock();
        let key = (ticket & u64::from(u32::MAX)) as usize;
        if lot
            .entries
            .get(key)
            .is_none_or(|entry| entry.ticket != ticket)
        {
            return None;
        }
        let entry = lot.entries.remove(key);
        lot.compact();
        drop(lot);
        if still_open {
            let _ = epoll::delete(self.epoll.get_ref(), &entry.parked.stream);
        }
        entry.parked.slot.unpark(entry.idle_key);
        Some(entry.parked)
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
                        if let Some(parked) = self.take(event.data.u64(), true) {
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
        {
            let mut lot = self.lock();
            while let Some(&Reverse((at, ticket))) = lot.deadlines.peek() {
                if at > now {
                    break;
                }
                lot.deadlines.pop();
                let key = (ticket & u64::from(u32::MAX)) as usize;
                if lot
                    .entries
                    .get(key)
                    .is_some_and(|entry| entry.ticket == ticket)
                {
                    expired.push(lot.entries.remove(key));
                }
            }
            lot.compact();
        }
        // Closing the socket takes it out of the epoll set.
        for entry in expired {
            entry.parked.slot.unpark(entry.idle_key);
        }
    }

    /// Closes the lot and hands back every connection in it, out of the epoll set: at
    /// shutdown, where each is closed, or served once more after a hand-over to a new
    /// process (a request may be on its way).
    pub(crate) fn release(&self) -> Vec<Parked> {
        let entries = {
            let mut lot = self.lock();
            lot.closed = true;
            lot.deadlines.clear();
            std::mem::take(&mut lot.entries)
        };
        entries
            .into_iter()
            .map(|(_, entry)| {
                let _ = epoll::delete(self.epoll.get_ref(), &entry.parked.stream);
                entry.parked.slot.unpark(entry.idle_key);
                entry.parked
            })
            .collect()
    }
}

impl ParkedConnections for Parking {
    fn close(&self, ticket: u64) -> bool {
        // Dropped here: the socket closes, the slots are given back.
        self.take(ticket, false).is_some()
    }
}

impl Lot {
    /// Rebuilds the deadlines from the entries when the ones left behind by entries
    /// that woke outnumber them: each costs 24 bytes, and a client that pauses often
    /// would leave one per pause until its idle timeout.
    fn compact(&mut self) {
        if self.deadlines.len() > 2 * self.entries.len() + 64 {
            self.deadlines = self
                .entries
                .iter()
                .map(|(_, entry)| Reverse((entry.deadline, entry.ticket)))
                .collect();
        }
    }
}
