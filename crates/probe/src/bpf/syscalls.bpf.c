// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Per-syscall counts, errors, bytes moved and (opt-in) latency, from the raw
 * tracepoints sys_enter and sys_exit (no tracefs, kprobes or fentry needed).
 *
 * Everything is indexed by syscall number in per-CPU arrays, so the hot path is one
 * array lookup and plain increments; asked for, a hash keyed by (task, syscall) breaks
 * the counts down by process or thread as well. Counting happens at entry, so
 * syscalls that never return (exit_group, a successful execve's old image) are counted
 * like strace -c counts them.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Syscall numbers at or above this are ignored (x86_64 and arm64 stay below 512). */
#define MAX_SYSCALLS 1024
_Static_assert((MAX_SYSCALLS & (MAX_SYSCALLS - 1)) == 0, "returns_bytes masks with MAX_SYSCALLS - 1");
/* Clock ids counted separately for clock_gettime; larger and negative ids
   (per-process and per-thread CPU clocks, dynamic clocks) share the last slot. */
#define CLOCK_SLOTS 16

struct syscall_stats {
	__u64 count;
	__u64 errors;
	__u64 bytes;
	__u64 total_ns;
};

struct start {
	__u64 ts;
	__u32 nr;
};

/* Set by user space before load. */
const volatile bool measure_latency = false;
/* Syscall number of clock_gettime on the target architecture (228 x86_64, 113 arm64). */
const volatile __u32 clock_gettime_nr = 0;
/* 1 for syscalls whose positive return value is a byte count (read, sendfile, ...). */
const volatile __u8 moves_bytes[MAX_SYSCALLS] = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, struct syscall_stats);
} stats SEC(".maps");

/* Latency histograms: slot nr * HIST_SLOTS + log2(ns). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALLS * HIST_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} latency SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CLOCK_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} clock_ids SEC(".maps");

/* Entry time of the syscall each thread is in; LRU so that threads that die inside
   a syscall cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct start);
} starts SEC(".maps");

/*
 * Counts by task as well (--per-pid, --per-tid): 0 no, PER_PROCESS keys them by tgid,
 * PER_THREAD by tid. Off, the maps below are shrunk to one entry and never touched.
 */
#define PER_PROCESS 1
#define PER_THREAD 2
const volatile __u8 per_task = 0;
/* Syscall numbers of execve and execveat: a task's name changes when one succeeds. */
const volatile __u32 execve_nr = ~0U;
const volatile __u32 execveat_nr = ~0U;

struct task_key {
	__u32 id;
	__u32 nr;
};

/* One task's calls of one syscall. A hash keyed by (task, syscall), not per CPU: a
   per-CPU value for every pair would cost memory times the CPU count; contention is
   only between threads of one process counted together. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct task_key);
	__type(value, struct syscall_stats);
} task_stats SEC(".maps");

struct task_name {
	char comm[16];
};

/* Each counted task's name: taken at its first counted syscall and after each exec,
   so a task that has exited keeps the name it ran under. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct task_name);
} task_names SEC(".maps");

/* Calls that found `task_stats` full: in the totals, not in any task's table. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} task_overflow SEC(".maps");

static __always_inline __u32 task_id(__u64 pid_tgid)
{
	return per_task == PER_THREAD ? (__u32)pid_tgid : pid_tgid >> 32;
}

static __always_inline void name_task(__u32 id)
{
	struct task_name name = {};

	bpf_get_current_comm(name.comm, sizeof(name.comm));
	bpf_map_update_elem(&task_names, &id, &name, BPF_ANY);
}

/* The current task's counters for syscall `nr`, created (and the task named) at its
   first call; NULL, counted in `task_overflow`, when the map is full. */
static __always_inline struct syscall_stats *task_counters(__u64 pid_tgid, __u32 nr)
{
	struct task_key key = { .id = task_id(pid_tgid), .nr = nr };
	struct syscall_stats *t, zero = {};
	__u32 first = 0;
	__u64 *lost;

	t = bpf_map_lookup_elem(&task_stats, &key);
	if (t)
		return t;
	/* Another CPU may create it first (a thread of the same process): then this
	   update fails with EEXIST and the lookup finds theirs. */
	bpf_map_update_elem(&task_stats, &key, &zero, BPF_NOEXIST);
	t = bpf_map_lookup_elem(&task_stats, &key);
	if (!t) {
		lost = bpf_map_lookup_elem(&task_overflow, &first);
		if (lost)
			(*lost)++;
		return NULL;
	}
	if (!bpf_map_lookup_elem(&task_names, &key.id))
		name_task(key.id);
	return t;
}

/*
 * Whether syscall `nr` returns a byte count. The mask keeps the index provably inside
 * the array for every verifier: without it, clang reloads `nr` from the stack slot it
 * spilled for the map key, and the 6.1 verifier (Debian 12) has lost the bound there
 * ("R3 unbounded memory access"); barrier_var stops clang dropping the mask as
 * redundant with the caller's range check.
 */
static __always_inline bool returns_bytes(__u64 nr)
{
	barrier_var(nr);
	return moves_bytes[nr & (MAX_SYSCALLS - 1)];
}

SEC("raw_tp/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct syscall_stats *s;
	__u32 nr = id;

	if (id < 0 || id >= MAX_SYSCALLS || !traced_current(pid_tgid >> 32))
		return 0;
	s = bpf_map_lookup_elem(&stats, &nr);
	if (!s)
		return 0;
	s->count++;
	if (per_task) {
		struct syscall_stats *t = task_counters(pid_tgid, nr);

		if (t)
			__sync_fetch_and_add(&t->count, 1);
	}

	if (nr == clock_gettime_nr) {
		__u64 clock = syscall_arg0(regs);
		__u32 slot = (__s32)clock >= 0 && clock < CLOCK_SLOTS ? clock : CLOCK_SLOTS - 1;
		__u64 *n = bpf_map_lookup_elem(&clock_ids, &slot);

		if (n)
			(*n)++;
	}

	if (measure_latency) {
		struct start st = { .ts = bpf_ktime_get_ns(), .nr = nr };
		__u32 tid = pid_tgid;

		bpf_map_update_elem(&starts, &tid, &st, BPF_ANY);
	}
	return 0;
}

/* Set by user space before load: a traced process's children are traced too. */
const volatile bool follow_forks = false;

/*
 * fork/clone of a traced process: its child is traced from its first syscall on
 * (strace -f). New threads share their tgid and are traced already.
 */
SEC("raw_tp/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tgid, child_tgid;
	__u8 one = 1;

	if (!filter_tgids || !follow_forks)
		return 0;
	parent_tgid = BPF_CORE_READ(parent, tgid);
	if (!bpf_map_lookup_elem(&targets, &parent_tgid))
		return 0;
	child_tgid = BPF_CORE_READ(child, tgid);
	bpf_map_update_elem(&targets, &child_tgid, &one, BPF_ANY);
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct syscall_stats *s, *t = NULL;
	__u64 bytes = 0, delta = 0;
	bool timed = false;
	long id;
	__u32 nr;

	if (!traced_current(pid_tgid >> 32))
		return 0;
	id = syscall_nr(regs);
	if (id < 0 || id >= MAX_SYSCALLS)
		return 0;
	nr = id;
	s = bpf_map_lookup_elem(&stats, &nr);
	if (!s)
		return 0;
	if (ret < 0)
		s->errors++;
	else if (ret > 0 && returns_bytes(nr))
		bytes = ret;
	s->bytes += bytes;

	if (measure_latency) {
		__u32 tid = pid_tgid;
		struct start *st = bpf_map_lookup_elem(&starts, &tid);

		/* No entry: the syscall began before we attached, or is another one
		   (an execve's new image reports the execve's exit). */
		if (st && st->nr == nr) {
			__u32 slot;
			__u64 *n;

			delta = bpf_ktime_get_ns() - st->ts;
			timed = true;
			slot = nr * HIST_SLOTS + hist_slot(delta);
			n = bpf_map_lookup_elem(&latency, &slot);
			s->total_ns += delta;
			if (n)
				(*n)++;
		}
		if (st)
			bpf_map_delete_elem(&starts, &tid);
	}

	if (per_task) {
		struct task_key key = { .id = task_id(pid_tgid), .nr = nr };

		/* Absent when the call's entry was not counted (it began before we
		   attached, or the map was full). */
		t = bpf_map_lookup_elem(&task_stats, &key);
		if (ret == 0 && (nr == execve_nr || nr == execveat_nr))
			name_task(key.id);
	}
	if (t) {
		if (ret < 0)
			__sync_fetch_and_add(&t->errors, 1);
		if (bytes)
			__sync_fetch_and_add(&t->bytes, bytes);
		if (timed)
			__sync_fetch_and_add(&t->total_ns, delta);
	}
	return 0;
}
