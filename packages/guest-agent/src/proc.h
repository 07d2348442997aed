/* Process table shared by proc.c (runtime I/O), proc_exec.c (spawning) and proc_ops.c. */
#ifndef DEN_PROC_H
#define DEN_PROC_H
#include "agent.h"
#include <sys/types.h>

enum { M_STREAM, M_BUFFER };

/* Output ring with absolute offsets. Allocated lazily and grown up to max, so small
 * outputs of many kept processes stay cheap. Holds [ring_start, end). */
struct ring {
	char *p;
	size_t cap, max;
	uint64_t start, end; /* start: nothing before it was ever stored (detached streams) */
};

struct proc {
	struct proc *next;
	uint64_t id;
	pid_t pid;
	uint32_t req_id; /* stream id while in stream mode */
	int mode, pty;
	char *desc;      /* pre-rendered "argv":[..] or "cmd":".." for proc.list */
	int64_t started_ms;

	int out_fd[3];       /* [1] stdout (or pty master), [2] stderr; -1 when done */
	int64_t drain_left[3]; /* after exit: bytes still to read; -1 not draining; -2 pty: until empty */
	uint64_t credit[3];
	uint64_t total[3];
	struct ring ring[3];
	size_t buffer_bytes;

	int in_fd;           /* stdin pipe / dup of pty master; -1 none */
	struct buf in_q;     /* bytes waiting to be written to in_fd */
	uint64_t in_debt;    /* stream mode: DATA bytes not yet credited back */
	int in_eof;          /* close in_fd once in_q is empty */

	int running, status, timed_out;
	int finished;        /* exited and output drained */
	uint64_t finish_seq;
	int64_t deadline;    /* monotonic ms; 0 none */
	char cg[64];         /* cgroup dir, "" without cgroups */
};

extern struct proc *g_procs;

struct proc *proc_find(uint64_t id);
void proc_kill_tree(struct proc *p);
void proc_free(struct proc *p);
void proc_status_json(struct jw *w, const struct proc *p);
uint64_t ring_start(const struct ring *r);
void proc_add_wait(uint32_t req_id, uint64_t proc_id, int64_t deadline);
/* Queue bytes for the child's stdin. */
/* proc_exec.c: first proc id above any left over by a previous agent instance. */
void proc_ids_init(void);
void proc_stdin_queue(struct proc *p, const void *d, size_t n);
#endif
