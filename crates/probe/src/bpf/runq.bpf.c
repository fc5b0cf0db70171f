// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Run-queue latency: the time a task spends runnable but not running, from the
 * moment it is woken (sched_wakeup, sched_wakeup_new) or preempted while still
 * runnable (sched_switch with prev in TASK_RUNNING) until sched_switch picks it.
 * The same measurement as libbpf-tools' runqlat, on raw tracepoints.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TASK_RUNNING 0

/* log2 histogram of run-queue delay in microseconds. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HIST_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} hist SEC(".maps");

/* Total delay in nanoseconds (the number of samples is the histogram's total). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} totals SEC(".maps");

/* When each runnable task (by tid) was enqueued. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} enqueued SEC(".maps");

/* The kernel renamed task_struct.state to __state in 5.14. */
struct task_struct___pre_5_14 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___pre_5_14 *)t, state);
}

static __always_inline void enqueue(struct task_struct *t)
{
	__u32 tgid = BPF_CORE_READ(t, tgid);
	__u32 tid = BPF_CORE_READ(t, pid);
	__u64 now;

	if (!tid || !traced(tgid))
		return;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&enqueued, &tid, &now, BPF_ANY);
}


SEC("raw_tp/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
	enqueue(p);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
	enqueue(p);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 tid = BPF_CORE_READ(next, pid);
	__u64 *since, *total, delta;
	__u32 slot, zero = 0;
	__u64 *n;

	if (task_state(prev) == TASK_RUNNING)
		enqueue(prev);

	since = bpf_map_lookup_elem(&enqueued, &tid);
	if (!since)
		return 0;
	delta = bpf_ktime_get_ns() - *since;
	bpf_map_delete_elem(&enqueued, &tid);

	slot = hist_slot(delta / 1000);
	n = bpf_map_lookup_elem(&hist, &slot);
	if (n)
		(*n)++;
	total = bpf_map_lookup_elem(&totals, &zero);
	if (total)
		*total += delta;
	return 0;
}
