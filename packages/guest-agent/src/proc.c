/* Running processes: output pumping (credit-limited streams or rings), stdin feeding,
 * exit handling, timeouts, waits, detached-output discarding and cgroup cleanup. */
#define _GNU_SOURCE
#include "proc.h"
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_KEPT 256   /* exited buffer-mode processes kept for proc.read/wait */
#define MAX_DISCARD 256
#define PTY_DRAIN_MAX (1 << 20)

struct proc *g_procs;
static uint64_t finish_seq;

struct wait {
	struct wait *next;
	uint32_t req;
	uint64_t proc;
	int64_t deadline; /* -1: none */
};
static struct wait *waits;

/* Output fds of exited execs, still held by detached children (`nohup srv &`): we keep
 * reading and dropping so they never see SIGPIPE; bounded, oldest closed first. */
static struct {
	int fd;
	uint64_t seq;
} disc[MAX_DISCARD];
static uint64_t disc_seq;

/* Cgroups of finished processes that were still populated: retried once a second. */
static char **cg_pending;
static size_t n_cg_pending;
static int64_t cg_next_try;

struct proc *proc_find(uint64_t id)
{
	for (struct proc *p = g_procs; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

int proc_running_count(void)
{
	int n = 0;
	for (struct proc *p = g_procs; p; p = p->next)
		n += p->running;
	return n;
}

uint64_t ring_start(const struct ring *r)
{
	uint64_t s = r->end > r->max ? r->end - r->max : 0;
	return s > r->start ? s : r->start;
}

static void ring_write(struct ring *r, const char *d, size_t n)
{
	if (n > r->max) {
		d += n - r->max;
		r->end += n - r->max;
		n = r->max;
	}
	if (r->end + n > r->cap && r->cap < r->max) {
		/* Not wrapped yet (end <= cap), so growing keeps positions valid. */
		size_t nc = r->cap ? r->cap : 65536;
		while (nc < r->end + n && nc < r->max)
			nc *= 2;
		if (nc > r->max)
			nc = r->max;
		r->p = xrealloc(r->p, nc);
		r->cap = nc;
	}
	size_t pos = r->end % r->max, first = r->max - pos < n ? r->max - pos : n;
	memcpy(r->p + pos, d, first);
	memcpy(r->p, d + first, n - first);
	r->end += n;
}

static void discard_add(int fd)
{
	int slot = 0;
	for (int i = 0; i < MAX_DISCARD; i++) {
		if (disc[i].fd < 0) {
			slot = i;
			break;
		}
		if (disc[i].seq < disc[slot].seq)
			slot = i;
	}
	if (disc[slot].fd >= 0)
		close(disc[slot].fd);
	disc[slot].fd = fd;
	disc[slot].seq = ++disc_seq;
}

/* The exec's view of a channel ends; keep=1 hands the fd to the discard set. */
static void chan_done(struct proc *p, int ch, int keep)
{
	if (p->out_fd[ch] < 0)
		return;
	if (keep)
		discard_add(p->out_fd[ch]);
	else
		close(p->out_fd[ch]);
	p->out_fd[ch] = -1;
	p->drain_left[ch] = -1;
}

static void read_out(struct proc *p, int ch)
{
	static char tmp[DATA_MAX];
	int fd = p->out_fd[ch];
	size_t want = DATA_MAX;
	ssize_t r;

	if (p->mode == M_STREAM) {
		if (!out_room())
			return;
		if (p->credit[ch] < want)
			want = p->credit[ch];
	}
	if (p->drain_left[ch] >= 0 && (uint64_t)p->drain_left[ch] < want)
		want = p->drain_left[ch];
	if (!want) {
		if (p->drain_left[ch] == 0)
			chan_done(p, ch, 1);
		return;
	}
	if (p->mode == M_STREAM) {
		r = out_data_from_fd(p->req_id, ch, fd, want);
	} else {
		r = read(fd, tmp, want);
		if (r > 0)
			ring_write(&p->ring[ch], tmp, r);
	}
	if (r > 0) {
		p->total[ch] += r;
		if (p->mode == M_STREAM)
			p->credit[ch] -= r;
		if (p->drain_left[ch] >= 0 && !(p->drain_left[ch] -= r))
			chan_done(p, ch, 1);
	} else if (r == 0) {
		chan_done(p, ch, 0);
	} else if (errno == EAGAIN || errno == EINTR) {
		/* Draining a pty ends when it's empty (a pipe drain is counted exactly). */
		if (p->drain_left[ch] >= 0 && errno == EAGAIN)
			chan_done(p, ch, 1);
	} else {
		chan_done(p, ch, 0); /* EIO: pty slave closed by everyone */
	}
}

static void credit_back(struct proc *p, size_t n)
{
	if (p->mode != M_STREAM || !p->in_debt || !n)
		return;
	uint64_t m = n < p->in_debt ? n : p->in_debt;
	p->in_debt -= m;
	out_credit(p->req_id, CH_STDIN, m);
}

static void close_stdin(struct proc *p)
{
	credit_back(p, buf_size(&p->in_q));
	buf_free(&p->in_q);
	if (p->in_fd >= 0)
		close(p->in_fd);
	p->in_fd = -1;
	p->in_eof = 0;
}

static void write_in(struct proc *p)
{
	while (p->in_fd >= 0 && buf_size(&p->in_q)) {
		ssize_t r = write(p->in_fd, buf_data(&p->in_q), buf_size(&p->in_q));
		if (r > 0) {
			buf_consume(&p->in_q, r);
			credit_back(p, r);
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			return;
		} else {
			close_stdin(p); /* reader gone (EPIPE) */
			return;
		}
	}
	if (p->in_eof && p->in_fd >= 0)
		close_stdin(p);
}

void proc_stdin_queue(struct proc *p, const void *d, size_t n)
{
	buf_add(&p->in_q, d, n);
	write_in(p);
}

static void disc_event(int i)
{
	char tmp[4096];
	for (int k = 0; k < 16; k++) {
		ssize_t r = read(disc[i].fd, tmp, sizeof tmp);
		if (r > 0)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		close(disc[i].fd); /* EOF, or EIO from a pty nobody holds */
		disc[i].fd = -1;
		return;
	}
}

void proc_event(int kind, void *ptr, int ch, short rev)
{
	struct proc *p = ptr;
	if (kind == W_DISCARD) {
		int i = (int)(intptr_t)ptr;
		if (disc[i].fd == ch)
			disc_event(i);
	} else if (kind == W_POUT) {
		if (p->out_fd[ch] >= 0)
			read_out(p, ch);
	} else if (kind == W_PIN) {
		if (rev & (POLLERR | POLLHUP) && !(rev & POLLOUT))
			close_stdin(p);
		else
			write_in(p);
	}
}

static void on_exit_status(struct proc *p, int st)
{
	p->running = 0;
	p->status = st;
	p->deadline = 0;
	/* Deliver only what the pipe holds right now; later writes come from detached
	 * children and are discarded. */
	for (int ch = 1; ch <= 2; ch++) {
		if (p->out_fd[ch] < 0)
			continue;
		int n = 0;
		if (p->pty)
			n = PTY_DRAIN_MAX; /* the tty may still be flushing: read until empty */
		else if (ioctl(p->out_fd[ch], FIONREAD, &n) < 0)
			n = 0;
		p->drain_left[ch] = n;
		if (!n)
			chan_done(p, ch, 1);
	}
}

void proc_sigchld(int sigfd)
{
	struct signalfd_siginfo si;
	int st;
	pid_t pid;
	while (read(sigfd, &si, sizeof si) == sizeof si)
		;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
		for (struct proc *p = g_procs; p; p = p->next)
			if (p->pid == pid && p->running)
				on_exit_status(p, st);
}

/* exit_code / signal / timed_out of an exited process. */
void proc_status_json(struct jw *w, const struct proc *p)
{
	int st = p->status;
	jw_key(w, "exit_code");
	if (!p->timed_out && WIFEXITED(st))
		jw_int(w, WEXITSTATUS(st));
	else
		jw_null(w);
	jw_key(w, "signal");
	if (p->timed_out)
		jw_int(w, SIGKILL);
	else if (WIFSIGNALED(st))
		jw_int(w, WTERMSIG(st));
	else
		jw_null(w);
	jw_kbool(w, "timed_out", p->timed_out);
}

/* Fallback without cgroups: the process group plus every descendant we can see. */
static void kill_descendants(pid_t root)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t *pids = NULL, *ppids = NULL;
	char *mark = NULL;
	size_t n = 0, cap = 0;
	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[64], st[512], *q;
		pid_t pid = atoi(e->d_name);
		if (pid <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%d/stat", pid);
		if (read_small(path, st, sizeof st) <= 0 || !(q = strrchr(st, ')')))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			pids = xrealloc(pids, cap * sizeof *pids);
			ppids = xrealloc(ppids, cap * sizeof *ppids);
		}
		pids[n] = pid;
		ppids[n] = atoi(q + 4); /* ") S ppid" */
		n++;
	}
	closedir(d);
	mark = xcalloc(n, 1);
	for (int changed = 1; changed;) {
		changed = 0;
		for (size_t i = 0; i < n; i++) {
			if (mark[i])
				continue;
			int hit = ppids[i] == root;
			for (size_t j = 0; j < n && !hit; j++)
				hit = mark[j] && pids[j] == ppids[i];
			if (hit) {
				mark[i] = 1;
				changed = 1;
				kill(pids[i], SIGKILL);
			}
		}
	}
	free(pids);
	free(ppids);
	free(mark);
}

void proc_kill_tree(struct proc *p)
{
	char path[96];
	if (p->cg[0]) {
		snprintf(path, sizeof path, "%s/cgroup.kill", p->cg);
		if (!write_str(path, "1"))
			return;
	}
	if (p->running)
		kill_descendants(p->pid);
	/* Once finished, the pid (and group id) may belong to someone else. */
	if (!p->finished)
		kill(-p->pid, SIGKILL);
	if (p->running)
		kill(p->pid, SIGKILL);
}

static void cg_remove(const char *cg)
{
	if (!cg[0] || !rmdir(cg) || errno == ENOENT)
		return;
	cg_pending = xrealloc(cg_pending, (n_cg_pending + 1) * sizeof *cg_pending);
	cg_pending[n_cg_pending++] = xstrdup(cg);
}

void proc_free(struct proc *p)
{
	for (struct proc **pp = &g_procs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	for (int ch = 1; ch <= 2; ch++) {
		if (p->out_fd[ch] >= 0)
			close(p->out_fd[ch]);
		free(p->ring[ch].p);
	}
	if (p->in_fd >= 0)
		close(p->in_fd);
	buf_free(&p->in_q);
	free(p->desc);
	free(p);
}

void proc_add_wait(uint32_t req, uint64_t proc, int64_t deadline)
{
	struct wait *w = xcalloc(1, sizeof *w);
	w->req = req;
	w->proc = proc;
	w->deadline = deadline;
	w->next = waits;
	waits = w;
}

static void answer_wait(struct wait *w, struct proc *p)
{
	struct buf b = {0};
	struct jw j;
	jw_init(&j, &b);
	if (!p) {
		/* Released while someone waited on it. */
		buf_adds(&b, "{\"ok\":false,\"code\":\"proc_not_found\",\"message\":\"process released\"}");
		out_json(F_RES, w->req, &b);
		buf_free(&b);
		return;
	}
	j.depth = 1; /* fields inside the RES object */
	j.first[1] = 1;
	jw_kbool(&j, "running", !p->finished);
	if (p->finished)
		proc_status_json(&j, p);
	send_res_ok(w->req, &b);
	buf_free(&b);
}

/* With fin: answers the waits on that (just finished) process. Without: answers expired
 * waits and waits on processes that no longer exist. */
static void service_waits(struct proc *fin, int64_t now)
{
	for (struct wait **ww = &waits; *ww;) {
		struct wait *w = *ww;
		struct proc *p = fin ? fin : proc_find(w->proc);
		int done;
		if (fin)
			done = w->proc == fin->id;
		else
			done = !p || p->finished || (w->deadline >= 0 && now >= w->deadline);
		if (done) {
			answer_wait(w, p);
			*ww = w->next;
			free(w);
		} else {
			ww = &w->next;
		}
	}
}

static void finish(struct proc *p)
{
	close_stdin(p);
	if (p->mode == M_STREAM) {
		struct buf b = {0};
		struct jw j;
		out_eof(p->req_id, CH_STDOUT);
		out_eof(p->req_id, CH_STDERR);
		jw_init(&j, &b);
		jw_obj(&j);
		jw_kstr(&j, "event", "exit");
		jw_kint(&j, "proc", p->id);
		proc_status_json(&j, p);
		jw_end_obj(&j);
		out_json(F_EVENT, p->req_id, &b);
		buf_free(&b);
	}
	cg_remove(p->cg);
	p->finished = 1;
	p->finish_seq = ++finish_seq;
	service_waits(p, 0);
	if (p->mode == M_STREAM) {
		proc_free(p);
		return;
	}
	/* Bound the number of exited processes kept around. */
	size_t kept = 0;
	struct proc *oldest = NULL;
	for (struct proc *q = g_procs; q; q = q->next)
		if (q->finished) {
			kept++;
			if (!oldest || q->finish_seq < oldest->finish_seq)
				oldest = q;
		}
	if (kept > MAX_KEPT)
		proc_free(oldest);
}

void proc_tick(int64_t now)
{
	for (struct proc *p = g_procs, *next; p; p = next) {
		next = p->next;
		if (p->running && p->deadline && now >= p->deadline) {
			p->timed_out = 1;
			p->deadline = 0;
			proc_kill_tree(p);
		}
		for (int ch = 1; ch <= 2; ch++)
			if (p->out_fd[ch] >= 0 && p->drain_left[ch] >= 0)
				read_out(p, ch);
		if (!p->running && !p->finished && p->out_fd[1] < 0 && p->out_fd[2] < 0) {
			/* A stream's tail waits for a connection (or is detached at the next hello). */
			if (p->mode == M_STREAM && (!conn_up() || outq_size() >= OUTQ_HARD))
				continue;
			finish(p);
		}
	}
	service_waits(NULL, now);
	if (n_cg_pending && now >= cg_next_try) {
		cg_next_try = now + 1000;
		for (size_t i = 0; i < n_cg_pending;) {
			if (!rmdir(cg_pending[i]) || errno == ENOENT) {
				free(cg_pending[i]);
				cg_pending[i] = cg_pending[--n_cg_pending];
			} else {
				i++;
			}
		}
	}
}

void proc_prepare(void)
{
	for (struct proc *p = g_procs; p; p = p->next) {
		for (int ch = 1; ch <= 2; ch++) {
			if (p->out_fd[ch] < 0)
				continue;
			if (p->mode == M_STREAM && (!out_room() || !p->credit[ch]))
				continue; /* no credit: the child blocks (backpressure) */
			if (p->drain_left[ch] >= 0)
				timer_at(0); /* draining is done from proc_tick */
			else
				watch(p->out_fd[ch], POLLIN, W_POUT, p, ch);
		}
		if (p->in_fd >= 0 && buf_size(&p->in_q))
			watch(p->in_fd, POLLOUT, W_PIN, p, 0);
		if (p->running && p->deadline)
			timer_at(p->deadline);
	}
	for (struct wait *w = waits; w; w = w->next)
		if (w->deadline >= 0)
			timer_at(w->deadline);
	for (int i = 0; i < MAX_DISCARD; i++)
		if (disc[i].fd >= 0)
			watch(disc[i].fd, POLLIN, W_DISCARD, (void *)(intptr_t)i, disc[i].fd);
	if (n_cg_pending)
		timer_at(cg_next_try);
}

void proc_new_session(void)
{
	for (struct proc *p = g_procs; p; p = p->next) {
		if (p->mode != M_STREAM)
			continue;
		p->mode = M_BUFFER;
		p->in_debt = 0;
		p->buffer_bytes = 1 << 20;
		for (int ch = 1; ch <= 2; ch++) {
			/* Offsets stay absolute: what was streamed counts as dropped. */
			p->ring[ch].max = p->buffer_bytes;
			p->ring[ch].start = p->ring[ch].end = p->total[ch];
		}
	}
	while (waits) {
		struct wait *w = waits;
		waits = w->next;
		free(w);
	}
}

static struct proc *stream_proc(uint32_t id)
{
	for (struct proc *p = g_procs; p; p = p->next)
		if (p->mode == M_STREAM && p->req_id == id)
			return p;
	return NULL;
}

void proc_on_data(uint32_t id, const char *d, size_t n)
{
	struct proc *p = stream_proc(id);
	if (!p)
		return;
	if (p->in_fd < 0) {
		out_credit(id, CH_STDIN, n); /* stdin is gone: drop, but don't stall the host */
		return;
	}
	p->in_debt += n;
	proc_stdin_queue(p, d, n);
}

void proc_on_eof(uint32_t id)
{
	struct proc *p = stream_proc(id);
	if (!p || p->in_fd < 0)
		return;
	p->in_eof = 1;
	write_in(p);
}

void proc_on_credit(uint32_t id, int ch, uint32_t n)
{
	struct proc *p = stream_proc(id);
	if (p)
		p->credit[ch] += n;
}

void proc_init(void)
{
	for (int i = 0; i < MAX_DISCARD; i++)
		disc[i].fd = -1;
	proc_ids_init();
}
