// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0)
//
// Reports execve/execveat calls that fail with ENOEXEC ("exec format error"): the kernel
// found no binary handler for the file, which for a container almost always means a
// binary built for another CPU architecture. And processes that exit with status 127,
// which is how glibc's loader ends a program it refuses to start ("CPU ISA level is lower
// than required", "Fatal glibc error: CPU does not support x86-64-v3"): the daemon reads
// the container's log to tell those from a shell's "command not found".
//
// The exit tracepoints carry only the return value, so the enter tracepoints remember the
// user-space filename pointer per thread. A failed exec has not replaced the caller's
// memory, so the pointer is still readable at exit.
//
// Event layout (little or native endian, 304 bytes) is decoded by src/event.rs; keep the two
// in step (EVENT_SIZE is checked there and by a test that parses this object).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define ENOEXEC 8
#define COMM_LEN 16
#define FILENAME_LEN 256

#define SYSCALL_EXECVE 0
#define SYSCALL_EXECVEAT 1
#define SYSCALL_EXIT_GROUP 2

// The status glibc's loader exits with when it cannot start a program.
#define LOADER_FAILURE_STATUS 127

#define FLAG_FILENAME_MISSING 1

// Only the fields we read; CO-RE relocates their offsets against the running kernel's BTF.
struct task_struct {
	int tgid;
	struct task_struct *real_parent;
} __attribute__((preserve_access_index));

struct exec_event {
	__u32 pid;
	__u32 tgid;
	__u32 ppid;
	__s32 ret;
	__u64 cgroup_id;
	__u32 syscall;
	__u32 flags;
	char comm[COMM_LEN];
	char filename[FILENAME_LEN];
};

_Static_assert(sizeof(struct exec_event) == 304, "src/event.rs EVENT_SIZE must match");

// Layout of syscalls/sys_enter_execve and sys_enter_execveat (tracefs `format` files).
struct enter_execve_ctx {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	const char *filename;
};

struct enter_execveat_ctx {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	__u64 fd;
	const char *filename;
};

struct exit_ctx {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	__s64 ret;
};

// Layout of syscalls/sys_enter_exit_group.
struct enter_exit_group_ctx {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	__u64 error_code;
};

// Thread id -> filename pointer, between the enter and exit of one exec.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} pending_execs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

// [0]: events lost because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost_events SEC(".maps");

static __always_inline void remember(const char *filename)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 ptr = (__u64)filename;
	bpf_map_update_elem(&pending_execs, &tid, &ptr, BPF_ANY);
}

// A ring-buffer record about the current task, its filename left empty; NULL (and
// counted as lost) when the ring buffer is full.
static __always_inline struct exec_event *start_event(__s32 ret, __u32 syscall)
{
	struct exec_event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	if (!event) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&lost_events, &zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return 0;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	event->pid = (__u32)pid_tgid;
	event->tgid = pid_tgid >> 32;
	event->ppid = BPF_CORE_READ(task, real_parent, tgid);
	event->ret = ret;
	event->cgroup_id = bpf_get_current_cgroup_id();
	event->syscall = syscall;
	event->flags = 0;
	bpf_get_current_comm(event->comm, sizeof(event->comm));
	event->filename[0] = 0;
	return event;
}

static __always_inline int report(__s64 ret, __u32 syscall)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *filename = bpf_map_lookup_elem(&pending_execs, &tid);
	__u64 filename_ptr = filename ? *filename : 0;
	bpf_map_delete_elem(&pending_execs, &tid);
	if (ret != -ENOEXEC)
		return 0;

	struct exec_event *event = start_event((__s32)ret, syscall);
	if (!event)
		return 0;
	if (!filename_ptr ||
	    bpf_probe_read_user_str(event->filename, sizeof(event->filename),
				    (const void *)filename_ptr) < 0)
		event->flags |= FLAG_FILENAME_MISSING;
	bpf_ringbuf_submit(event, 0);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_execve")
int enter_execve(struct enter_execve_ctx *ctx)
{
	remember(ctx->filename);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_execveat")
int enter_execveat(struct enter_execveat_ctx *ctx)
{
	remember(ctx->filename);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_execve")
int exit_execve(struct exit_ctx *ctx)
{
	return report(ctx->ret, SYSCALL_EXECVE);
}

SEC("tracepoint/syscalls/sys_exit_execveat")
int exit_execveat(struct exit_ctx *ctx)
{
	return report(ctx->ret, SYSCALL_EXECVEAT);
}

// exit_group(127): the whole process ends with the loader's failure status. Other
// statuses, by far the most exits, cost one comparison.
SEC("tracepoint/syscalls/sys_enter_exit_group")
int enter_exit_group(struct enter_exit_group_ctx *ctx)
{
	if ((ctx->error_code & 0xff) != LOADER_FAILURE_STATUS)
		return 0;
	struct exec_event *event = start_event(LOADER_FAILURE_STATUS, SYSCALL_EXIT_GROUP);
	if (!event)
		return 0;
	event->flags |= FLAG_FILENAME_MISSING;
	bpf_ringbuf_submit(event, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
