//! A concurrent hash map split into independently locked, cache-padded shards whose
//! tables can be placed on chosen NUMA nodes.
//!
//! The seed's "NUMA-aware" map routed a key by the *caller's* node, so two threads on
//! different nodes looked for the same key in different shards and missed it. Here a
//! key's shard depends on its hash alone (every thread finds every key); placement
//! decides only where each shard's table lives, which is what a memory policy can
//! control: put all shards on the node of the threads that use the map
//! ([`Placement::Local`] or [`Placement::Nodes`] with one node), or spread them over
//! several nodes to share their memory bandwidth.

use std::alloc::Layout;
use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::ptr::NonNull;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use allocator_api2::alloc::{AllocError, Allocator, Global};
use hashbrown::hash_table::{Entry, HashTable};

use crate::alloc::NodeAllocator;
use crate::counter::CachePadded;
use crate::policy::{self, MemPolicy, Mode, PolicyError};
use crate::IdSet;

/// Where a [`ShardedMap`] keeps its shards' tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The global allocator's memory: pages land on the node of whichever thread first
    /// touches them (the kernel's default policy).
    Anywhere,
    /// On the node of the CPU that builds the map (getcpu(2)); for a map built by the
    /// threads' own, bound, code.
    Local,
    /// Shard `i` on the `i % n`-th of these `n` nodes.
    Nodes(IdSet),
}

/// A hash map for many threads: `shards` `RwLock`ed tables, each on its own cache
/// lines, a key's shard chosen by its hash.
///
/// Reads of different shards never contend, and neither do a read and a write of
/// different shards. Values are reached through closures ([`ShardedMap::read`],
/// [`ShardedMap::update_or_insert_with`]) so that no lock guard escapes; keep those
/// closures short, as they run under the shard's lock.
///
/// The default hasher is std's `RandomState` (SipHash, keyed per map), which resists
/// HashDoS; pass a faster one with [`ShardedMap::with_shards_and_hasher`].
pub struct ShardedMap<K, V, S = RandomState> {
    shards: Box<[CachePadded<Shard<K, V>>]>,
    placement: Vec<Option<u32>>,
    hasher: S,
}

impl<K: Hash + Eq, V> ShardedMap<K, V, RandomState> {
    /// A map with four shards per CPU (a power of two), in the global allocator's memory.
    pub fn new() -> ShardedMap<K, V, RandomState> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        ShardedMap::with_shards_and_hasher(cpus * 4, RandomState::new())
    }
}

impl<K: Hash + Eq, V> Default for ShardedMap<K, V, RandomState> {
    fn default() -> Self {
        ShardedMap::new()
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> ShardedMap<K, V, S> {
    /// A map with `shards` shards (rounded up to a power of two, at most 65536) in the
    /// global allocator's memory.
    pub fn with_shards_and_hasher(shards: usize, hasher: S) -> ShardedMap<K, V, S> {
        ShardedMap::placed(shards, &Placement::Anywhere, hasher)
            .expect("Placement::Anywhere makes no policy call")
    }

    /// A map whose shards' tables are placed as `placement` says. Fails, explained,
    /// when a node cannot take memory (absent, without memory, outside the cpuset).
    pub fn placed(
        shards: usize,
        placement: &Placement,
        hasher: S,
    ) -> Result<ShardedMap<K, V, S>, PolicyError> {
        let count = shards.clamp(1, 1 << 16).next_power_of_two();
        let nodes: Vec<u32> = match placement {
            Placement::Anywhere => Vec::new(),
            Placement::Local => {
                let (_, node) = policy::current_cpu_and_node().map_err(|e| {
                    PolicyError::from_io("getcpu", "the current node", e, &IdSet::new())
                })?;
                vec![node]
            }
            Placement::Nodes(set) => set.iter().collect(),
        };
        // One checked allocator per node, cloned into that node's shards.
        let allocators: Vec<NodeAllocator> = nodes
            .iter()
            .map(|&node| {
                NodeAllocator::new(MemPolicy {
                    mode: Mode::Preferred,
                    nodes: std::iter::once(node).collect(),
                })
            })
            .collect::<Result<_, _>>()?;
        let placement: Vec<Option<u32>> = (0..count)
            .map(|i| (!nodes.is_empty()).then(|| nodes[i % nodes.len()]))
            .collect();
        let shards = (0..count)
            .map(|i| {
                let allocator = match allocators.len() {
                    0 => ShardAllocator(None),
                    n => ShardAllocator(Some(allocators[i % n].clone())),
                };
                CachePadded::new(RwLock::new(HashTable::new_in(allocator)))
            })
            .collect();
        Ok(ShardedMap {
            shards,
            placement,
            hasher,
        })
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The node each shard's table is placed on (`None`: wherever first touched).
    pub fn shard_nodes(&self) -> &[Option<u32>] {
        &self.placement
    }

    /// Inserts, returning the value the key had.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        let hash = self.hasher.hash_one(&key);
        let mut shard = self.write(hash);
        match shard.entry(hash, |(k, _)| *k == key, |(k, _)| self.hasher.hash_one(k)) {
            Entry::Occupied(mut entry) => Some(std::mem::replace(&mut entry.get_mut().1, value)),
            Entry::Vacant(entry) => {
                entry.insert((key, value));
                None
            }
        }
    }

    /// A clone of the key's value.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        V: Clone,
    {
        self.read(key, V::clone)
    }

    /// Calls `f` with the key's value under the shard's read lock.
    pub fn read<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.read_shard(hash);
        shard
            .find(hash, |(k, _)| k.borrow() == key)
            .map(|(_, v)| f(v))
    }

    /// Whether the key is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.read(key, |_| ()).is_some()
    }

    /// Calls `f` with the key's value under the shard's write lock, inserting
    /// `default()` first when the key is absent.
    pub fn update_or_insert_with<R>(
        &self,
        key: K,
        default: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> R {
        let hash = self.hasher.hash_one(&key);
        let mut shard = self.write(hash);
        let entry = shard.entry(hash, |(k, _)| *k == key, |(k, _)| self.hasher.hash_one(k));
        let mut occupied = entry.or_insert_with(|| (key, default()));
        f(&mut occupied.get_mut().1)
    }

    /// Removes the key, returning its value.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.write(hash);
        match shard.find_entry(hash, |(k, _)| k.borrow() == key) {
            Ok(entry) => Some(entry.remove().0 .1),
            Err(_) => None,
        }
    }

    /// The number of entries (shard by shard, so not a snapshot under writes).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock_read(s).len()).sum()
    }

    /// Whether no shard holds an entry.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock_read(s).is_empty())
    }

    /// Removes every entry, keeping the shards' allocations.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            lock_write(shard).clear();
        }
    }

    /// The shard of a hash: bits 32.. of it, clear of the low bits hashbrown indexes
    /// its table with and of the top 7 it keeps as tags.
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    fn read_shard(&self, hash: u64) -> RwLockReadGuard<'_, Table<K, V>> {
        lock_read(&self.shards[self.shard_index(hash)])
    }

    fn write(&self, hash: u64) -> RwLockWriteGuard<'_, Table<K, V>> {
        lock_write(&self.shards[self.shard_index(hash)])
    }
}

impl<K, V, S> std::fmt::Debug for ShardedMap<K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedMap")
            .field("shards", &self.shards.len())
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}

// A panic inside a caller's closure poisons the lock but leaves the table consistent
// (hashbrown's operations are panic-safe), so the map stays usable.
fn lock_read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn lock_write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// One shard's table of entries.
type Table<K, V> = HashTable<(K, V), ShardAllocator>;

/// A shard: a table behind its own lock.
type Shard<K, V> = RwLock<Table<K, V>>;

/// A shard's allocator: node-bound, or the global allocator.
#[derive(Clone, Debug)]
struct ShardAllocator(Option<NodeAllocator>);

// SAFETY: delegates every call to one fixed allocator (the NodeAllocator or Global,
// chosen at construction and never changed), so blocks are freed by the allocator
// that made them.
unsafe impl Allocator for ShardAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        match &self.0 {
            Some(node) => node.allocate(layout),
            None => Global.allocate(layout),
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        match &self.0 {
            // SAFETY: the caller passes a block this allocator (so `node`) gave.
            Some(node) => unsafe { node.deallocate(ptr, layout) },
            // SAFETY: as above, with Global.
            None => unsafe { Global.deallocate(ptr, layout) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_hash_map() {
        let map: ShardedMap<String, u32> = ShardedMap::new();
        let mut model = HashMap::new();
        let mut seed = 7u64;
        for _ in 0..20_000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("k{}", (seed >> 33) % 500);
            match (seed >> 20) % 4 {
                0 => assert_eq!(map.remove(key.as_str()), model.remove(&key)),
                1 => assert_eq!(map.get(key.as_str()), model.get(&key).copied()),
                2 => {
                    let got = map.update_or_insert_with(
                        key.clone(),
                        || 0,
                        |v| {
                            *v += 1;
                            *v
                        },
                    );
                    let want = model.entry(key).or_insert(0);
                    *want += 1;
                    assert_eq!(got, *want);
                }
                _ => assert_eq!(
                    map.insert(key.clone(), seed as u32),
                    model.insert(key, seed as u32)
                ),
            }
        }
        assert_eq!(map.len(), model.len());
        for (k, v) in &model {
            assert!(map.contains_key(k.as_str()));
            assert_eq!(map.read(k.as_str(), |x| *x), Some(*v));
        }
        map.clear();
        assert!(map.is_empty());
    }

    #[test]
    fn threads_see_each_others_keys() {
        let map: ShardedMap<u64, u64> = ShardedMap::with_shards_and_hasher(8, RandomState::new());
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let map = &map;
                scope.spawn(move || {
                    for i in 0..5_000 {
                        map.insert(t * 1_000_000 + i, i);
                        map.update_or_insert_with(u64::MAX, || 0, |v| *v += 1);
                    }
                });
            }
        });
        assert_eq!(map.len(), 20_001);
        assert_eq!(map.get(&u64::MAX), Some(20_000));
        assert_eq!(map.get(&3_004_999), Some(4_999));
    }

    #[test]
    fn a_panicking_closure_leaves_the_map_usable() {
        let map: ShardedMap<u32, u32> = ShardedMap::with_shards_and_hasher(1, RandomState::new());
        map.insert(1, 1);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            map.update_or_insert_with(1, || 0, |_| panic!("caller's bug"))
        }));
        assert!(result.is_err());
        map.insert(2, 2);
        assert_eq!((map.get(&1), map.get(&2)), (Some(1), Some(2)));
    }

    #[test]
    fn shards_are_padded_and_a_power_of_two() {
        let map: ShardedMap<u32, u32> = ShardedMap::with_shards_and_hasher(5, RandomState::new());
        assert_eq!(map.shard_count(), 8);
        let first = &*map.shards[0] as *const _ as usize;
        let second = &*map.shards[1] as *const _ as usize;
        assert!(second - first >= 64);
    }

    #[test]
    fn placed_tables_live_on_their_node() {
        let map: ShardedMap<u64, u64> =
            ShardedMap::placed(2, &Placement::Local, RandomState::new()).unwrap();
        assert_eq!(map.shard_nodes(), &[Some(0), Some(0)]);
        for i in 0..50_000 {
            map.insert(i, i);
        }
        // Entries sit inside the table allocation, which is a bound mapping.
        let node = map
            .read(&49_999, |v| {
                // SAFETY: v is a live &u64, so its first byte is in bounds.
                let first: &u8 = unsafe { &*(v as *const u64).cast::<u8>() };
                policy::node_of(first)
            })
            .unwrap()
            .unwrap();
        assert_eq!(node, 0);
    }

    #[test]
    fn placing_on_an_absent_node_is_an_explained_error() {
        let nodes = IdSet::parse_list("200").unwrap();
        let error = ShardedMap::<u32, u32>::placed(4, &Placement::Nodes(nodes), RandomState::new())
            .unwrap_err();
        assert!(error.to_string().contains("200"), "{error}");
    }
}
