/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Helpers shared by probe's BPF programs.
 *
 * vmlinux.h is generated from this machine's x86_64 kernel (`cargo xtask vmlinux`).
 * Every kernel type is read through CO-RE (`preserve_access_index`), so the same
 * source also loads on arm64 kernels: the only type whose fields differ between the
 * architectures, struct pt_regs, is reached through the per-architecture "flavour"
 * below, which libbpf matches to the running kernel's struct pt_regs by name.
 */
#ifndef PROBE_COMMON_H
#define PROBE_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

/* Histogram slots: log2 buckets, the last one open-ended. */
#define HIST_SLOTS 32

/*
 * Floor of log2. clang 14 crashes on __builtin_clzll in BPF code, so this is the
 * branch-free bit trick used by libbpf-tools (bits.bpf.h).
 */
static __always_inline __u64 log2_u32(__u32 v)
{
	__u32 shift, r;

	r = (v > 0xFFFF) << 4; v >>= r;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u64 log2_u64(__u64 v)
{
	__u32 hi = v >> 32;

	if (hi)
		return log2_u32(hi) + 32;
	return log2_u32(v);
}

/* The histogram slot of a value: 0 for 0 and 1, then floor(log2(v)). */
static __always_inline __u32 hist_slot(__u64 v)
{
	__u64 slot = log2_u64(v);

	return slot >= HIST_SLOTS ? HIST_SLOTS - 1 : slot;
}

/* arm64's struct pt_regs, as far as we read it (matched by CO-RE on arm64 kernels). */
struct pt_regs___probe_arm64 {
	__u64 regs[31];
	__u64 orig_x0;
	__s32 syscallno;
} __attribute__((preserve_access_index));

/* The syscall number of the syscall that `regs` belongs to (valid at entry and exit). */
static __always_inline long syscall_nr(struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(regs, orig_ax);
#elif defined(__TARGET_ARCH_arm64)
	return BPF_CORE_READ((struct pt_regs___probe_arm64 *)regs, syscallno);
#else
#error "probe's BPF programs support x86_64 and arm64"
#endif
}

/* The first argument of the syscall that `regs` belongs to. */
static __always_inline __u64 syscall_arg0(struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(regs, di);
#elif defined(__TARGET_ARCH_arm64)
	return BPF_CORE_READ((struct pt_regs___probe_arm64 *)regs, orig_x0);
#endif
}

/*
 * The processes being traced, by tgid (every thread of a process shares it). Only
 * consulted when the program was loaded with `filter_tgids` set.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

/* Set by user space before load: trace only the tgids in `targets`. */
const volatile bool filter_tgids = false;

/* Whether a task of process `tgid` is one we trace. */
static __always_inline bool traced(__u32 tgid)
{
	if (!filter_tgids)
		return true;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

/* Set by user space before load: trace only tasks whose comm is `target_comm`. */
const volatile bool filter_comm = false;
const volatile char target_comm[16] = {};

/*
 * Whether the current task is one we trace: its process is a target, and with
 * `filter_comm` its name (comm, as /proc/PID/comm shows it) equals `target_comm`.
 * The name is read at every event, so processes started after attaching and renamed
 * threads are followed as they are at that moment.
 */
static __always_inline bool traced_current(__u32 tgid)
{
	char comm[16];
	int i;

	if (!traced(tgid))
		return false;
	if (!filter_comm)
		return true;
	if (bpf_get_current_comm(comm, sizeof(comm)))
		return false;
	for (i = 0; i < sizeof(comm); i++) {
		if (comm[i] != target_comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

#endif /* PROBE_COMMON_H */
