// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Per-syscall counts, errors, bytes moved and (opt-in) latency, from the raw
 * tracepoints sys_enter and sys_exit (no tracefs, kprobes or fentry needed).
 *
 * Everything is indexed by syscall number in per-CPU arrays, so the hot path is one
 * array lookup and plain increments. Counting happens at entry, so syscalls that
 * never return (exit_group, a successful execve's old image) are counted like
 * strace -c counts them.
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
	struct syscall_stats *s;
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
		s->bytes += ret;

	if (measure_latency) {
		__u32 tid = pid_tgid;
		struct start *st = bpf_map_lookup_elem(&starts, &tid);

		/* No entry: the syscall began before we attached, or is another one
		   (an execve's new image reports the execve's exit). */
		if (st && st->nr == nr) {
			__u64 delta = bpf_ktime_get_ns() - st->ts;
			__u32 slot = nr * HIST_SLOTS + hist_slot(delta);
			__u64 *n = bpf_map_lookup_elem(&latency, &slot);

			s->total_ns += delta;
			if (n)
				(*n)++;
		}
		if (st)
			bpf_map_delete_elem(&starts, &tid);
	}
	return 0;
}
