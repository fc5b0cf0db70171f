// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Page faults per process. User space opens the software perf events
 * page-faults-min and page-faults-maj on every CPU with a sample period of 1 and
 * attaches these programs, so each fault runs one of them; they count it against the
 * faulting process. Works on every architecture (x86's page_fault_user tracepoint
 * has no arm64 twin and does not tell minor from major).
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct fault_counts {
	__u64 minor;
	__u64 major;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct fault_counts);
} faults SEC(".maps");

static __always_inline struct fault_counts *counts_of_current(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct fault_counts *c, zero = {};

	if (!traced_current(tgid))
		return NULL;
	c = bpf_map_lookup_elem(&faults, &tgid);
	if (c)
		return c;
	bpf_get_current_comm(zero.comm, sizeof(zero.comm));
	bpf_map_update_elem(&faults, &tgid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&faults, &tgid);
}

SEC("perf_event")
int on_minor_fault(struct bpf_perf_event_data *ctx)
{
	struct fault_counts *c = counts_of_current();

	if (c)
		__sync_fetch_and_add(&c->minor, 1);
	return 0;
}

SEC("perf_event")
int on_major_fault(struct bpf_perf_event_data *ctx)
{
	struct fault_counts *c = counts_of_current();

	if (c)
		__sync_fetch_and_add(&c->major, 1);
	return 0;
}
