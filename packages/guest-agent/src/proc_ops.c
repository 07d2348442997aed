/* Process requests other than exec. */
#define _GNU_SOURCE
#include "proc.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#define READ_MAX (512u << 10) /* keeps a proc.read RES (base64) under MAX_PAYLOAD */
#define STDIN_QUEUE_MAX (4u << 20)

static struct proc *get_proc(struct req *r)
{
	int64_t id;
	if (arg_int(r, "proc", &id, 1) < 0)
		return NULL;
	struct proc *p = proc_find(id);
	if (!p)
		req_err(r, "proc_not_found", "no process %lld", (long long)id);
	return p;
}

int op_proc_list(struct req *r)
{
	struct jw *w = r->w;
	jw_key(w, "procs");
	jw_arr(w);
	for (struct proc *p = g_procs; p; p = p->next) {
		if (w->b->len > MAX_PAYLOAD - 4096)
			break; /* never produce an oversized frame */
		jw_obj(w);
		jw_kint(w, "proc", p->id);
		jw_kint(w, "pid", p->pid);
		jw_raw(w, p->desc);
		jw_kstr(w, "mode", p->mode == M_STREAM ? "stream" : "buffer");
		jw_kbool(w, "running", p->running);
		if (!p->running) {
			proc_status_json(w, p);
		} else {
			jw_key(w, "exit_code");
			jw_null(w);
			jw_key(w, "signal");
			jw_null(w);
			jw_kbool(w, "timed_out", 0);
		}
		jw_kint(w, "started_ms", p->started_ms);
		jw_end_obj(w);
	}
	jw_end_arr(w);
	return 0;
}

int op_proc_read(struct req *r)
{
	struct proc *p = get_proc(r);
	int64_t ch = 1, off = 0, max = 262144;
	if (!p || arg_int(r, "channel", &ch, 0) < 0 || arg_int(r, "offset", &off, 0) < 0 ||
	    arg_int(r, "max", &max, 0) < 0)
		return -1;
	if ((ch != 1 && ch != 2) || off < 0 || max < 0)
		return req_err(r, "invalid_argument", "bad channel, offset or max");
	if (p->mode == M_STREAM)
		return req_err(r, "invalid_argument", "process %llu is streamed, not buffered",
		               (unsigned long long)p->id);
	if ((uint64_t)max > READ_MAX)
		max = READ_MAX;
	struct ring *g = &p->ring[ch];
	uint64_t start = (uint64_t)off, rs = ring_start(g);
	int dropped = start < rs;
	if (dropped)
		start = rs;
	if (start > g->end)
		start = g->end;
	uint64_t len = g->end - start;
	if (len > (uint64_t)max)
		len = max;
	char *tmp = xmalloc(len);
	for (uint64_t i = 0; i < len;) {
		/* Copy out in at most two pieces around the wrap point. */
		size_t pos = (start + i) % g->max, n = g->max - pos;
		if (n > len - i)
			n = len - i;
		memcpy(tmp + i, g->p + pos, n);
		i += n;
	}
	jw_key(r->w, "data");
	jw_b64(r->w, tmp, len);
	free(tmp);
	jw_kint(r->w, "offset", start);
	jw_kint(r->w, "next_offset", start + len);
	jw_kbool(r->w, "dropped", dropped);
	jw_kbool(r->w, "eof", p->finished && start + len >= g->end);
	return 0;
}

int op_proc_wait(struct req *r)
{
	struct proc *p = get_proc(r);
	int64_t t = -1;
	if (!p || arg_int(r, "timeout_ms", &t, 0) < 0)
		return -1;
	if (p->finished || t == 0) {
		jw_kbool(r->w, "running", !p->finished);
		if (p->finished)
			proc_status_json(r->w, p);
		return 0;
	}
	proc_add_wait(r->id, p->id, t < 0 ? -1 : mono_ms() + t);
	return OP_DEFER;
}

int op_proc_stdin(struct req *r)
{
	struct proc *p = get_proc(r);
	const char *d = NULL;
	int eof = 0;
	if (!p || arg_str(r, "data", &d, 0) < 0 || arg_bool(r, "eof", &eof) < 0)
		return -1;
	if (p->in_fd < 0)
		return req_err(r, "invalid_argument", "process %llu has no stdin pipe", (unsigned long long)p->id);
	size_t l = d ? strlen(d) : 0, n = 0;
	if (l > (256u << 10) / 3 * 4 + 4)
		return req_err(r, "invalid_argument", "at most 256 KiB per call");
	if (buf_size(&p->in_q) > STDIN_QUEUE_MAX)
		return req_err(r, "invalid_argument", "stdin buffer full (process not reading)");
	unsigned char *tmp = xmalloc(l / 4 * 3 + 3);
	if (d && b64_decode(d, l, tmp, &n)) {
		free(tmp);
		return req_err(r, "invalid_argument", "\"data\" is not base64");
	}
	if (eof)
		p->in_eof = 1;
	proc_stdin_queue(p, tmp, n);
	free(tmp);
	return 0;
}

int op_proc_signal(struct req *r)
{
	struct proc *p = get_proc(r);
	int64_t sig;
	if (!p || arg_int(r, "signal", &sig, 1) < 0)
		return -1;
	if (sig < 0 || sig >= NSIG)
		return req_err(r, "invalid_argument", "bad signal %lld", (long long)sig);
	/* The main process leads its own group (setsid); a gone group is not an error. */
	if (!p->finished)
		kill(-p->pid, sig);
	return 0;
}

int op_proc_kill(struct req *r)
{
	struct proc *p = get_proc(r);
	if (!p)
		return -1;
	proc_kill_tree(p);
	return 0;
}

int op_proc_release(struct req *r)
{
	struct proc *p = get_proc(r);
	if (!p)
		return -1;
	if (!p->finished || p->mode == M_STREAM)
		return req_err(r, "invalid_argument", "process %llu is still running", (unsigned long long)p->id);
	proc_free(p);
	return 0;
}

int op_pty_resize(struct req *r)
{
	struct proc *p = get_proc(r);
	int64_t rows, cols;
	if (!p || arg_int(r, "rows", &rows, 1) < 0 || arg_int(r, "cols", &cols, 1) < 0)
		return -1;
	if (!p->pty)
		return req_err(r, "invalid_argument", "process %llu has no pty", (unsigned long long)p->id);
	if (rows <= 0 || cols <= 0 || rows > 65535 || cols > 65535)
		return req_err(r, "invalid_argument", "bad size");
	struct winsize ws = {.ws_row = rows, .ws_col = cols};
	int fd = p->out_fd[1] >= 0 ? p->out_fd[1] : p->in_fd;
	if (fd >= 0 && ioctl(fd, TIOCSWINSZ, &ws) < 0)
		return req_err(r, "io_error", "TIOCSWINSZ: %s", strerror(errno));
	return 0;
}
