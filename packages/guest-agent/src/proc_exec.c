/* exec: argument parsing, cgroup placement and fork/exec with a close-on-exec error pipe. */
#define _GNU_SOURCE
#include "proc.h"
#include <dirent.h>
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup/den"
#define STDIN_WINDOW 65536
extern char **environ;

static uint64_t next_id = 1;

void proc_ids_init(void)
{
	/* A restarted agent must not reuse ids whose cgroups still exist. */
	DIR *d = g_cgroup ? opendir(CG_ROOT) : NULL;
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d))) {
		char *end, path[300];
		if (e->d_name[0] != 'p')
			continue;
		uint64_t id = strtoull(e->d_name + 1, &end, 10);
		if (*end || !id)
			continue;
		if (id >= next_id)
			next_id = id + 1;
		snprintf(path, sizeof path, CG_ROOT "/%s", e->d_name);
		rmdir(path); /* fails while populated: fine */
	}
	closedir(d);
}

struct child_err {
	int stage; /* 1 chdir, 2 exec, 3 becoming the user */
	int err;
};

/* Drops root for `u` (resolved before the fork: no file reading here). The terminal of a
 * pty becomes the user's, as login does. 0 or -1 (errno). */
static int become(const struct guser *u, int pty)
{
	if (pty && fchown(0, u->uid, -1))
		return -1;
	if (setgroups(u->ngroups, u->groups) || setgid(u->gid) || setuid(u->uid))
		return -1;
	return 0;
}

/* Runs in the child after fork: only async-signal-safe-ish work, then exec. */
static void __attribute__((noreturn))
child_exec(const char *cgprocs, const char *cwd, char **argv, char **envp, int errfd, const struct guser *u, int pty)
{
	sigset_t none;
	struct child_err ce;
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (cgprocs) {
		int fd = open(cgprocs, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t r = write(fd, "0", 1);
			(void)r;
			close(fd);
		}
	}
	/* oom_score_adj is inherited: give the workload the normal score back. */
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r = write(fd, "0", 1);
		(void)r;
		close(fd);
	}
	umask(022); /* what every exec starts with (files 0644, directories 0755) */
	ce.stage = 3;
	if (u && become(u, pty))
		goto failed;
	/* As the user: a home it may not enter is its problem, reported as such. */
	ce.stage = 1;
	if (chdir(cwd) == 0) {
		ce.stage = 2;
		environ = envp; /* execvp searches the PATH of environ */
		execvp(argv[0], argv);
	}
failed:
	ce.err = errno;
	ssize_t r = write(errfd, &ce, sizeof ce);
	(void)r;
	_exit(127);
}

static void env_set(char ***env, size_t *n, const char *k, size_t kl, const char *v)
{
	char *s = xmalloc(kl + strlen(v) + 2);
	memcpy(s, k, kl);
	s[kl] = '=';
	strcpy(s + kl + 1, v);
	for (size_t i = 0; i < *n; i++)
		if (!strncmp((*env)[i], k, kl) && (*env)[i][kl] == '=') {
			free((*env)[i]);
			(*env)[i] = s;
			return;
		}
	*env = xrealloc(*env, (*n + 2) * sizeof **env);
	(*env)[(*n)++] = s;
	(*env)[*n] = NULL;
}

static void strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

struct spec {
	char **argv, **env;
	const char *cwd;
	struct guser user;
	int has_user;
	int via_shell; /* a "cmd" string, run by the guest's shell */
	int stdin_pipe, stdin_open, pty, rows, cols, mode;
	unsigned char *stdin_data;
	size_t stdin_len;
	int64_t timeout_ms, window, buffer_bytes;
	int has_window; /* an explicit 0 means: wait for CREDIT */
};

static int parse(struct req *r, struct spec *s)
{
	const struct jv *av = jget(r->a, "argv"), *ev = jget(r->a, "env"), *pv = jget(r->a, "pty");
	const char *cmd = NULL, *mode = NULL, *sd = NULL;
	size_t n = 0;
	int rc;

	if ((rc = arg_str(r, "cmd", &cmd, 0)) < 0)
		return -1;
	if (av && av->t != J_NULL) {
		if (av->t != J_ARR || !av->n)
			return req_err(r, "invalid_argument", "\"argv\" must be a non-empty array of strings");
		s->argv = xcalloc(av->n + 1, sizeof *s->argv);
		for (size_t i = 0; i < av->n; i++) {
			const struct jv *a = av->items[i];
			if (a->t != J_STR || strlen(a->s) != a->n)
				return req_err(r, "invalid_argument", "\"argv\" must be a non-empty array of strings");
			s->argv[i] = xstrdup(a->s);
		}
	} else if (cmd) {
		s->argv = xcalloc(4, sizeof *s->argv);
		s->via_shell = 1;
		s->argv[0] = xstrdup(access("/bin/bash", X_OK) ? "/bin/sh" : "/bin/bash");
		s->argv[1] = xstrdup("-c");
		s->argv[2] = xstrdup(cmd);
	} else {
		return req_err(r, "invalid_argument", "\"argv\" or \"cmd\" is required");
	}
	s->cwd = NULL;
	if ((s->has_user = arg_user(r, &s->user)) < 0)
		return -1;
	if (arg_str(r, "cwd", &s->cwd, 0) < 0 || arg_bool(r, "stdin", &s->stdin_open) < 0 ||
	    arg_str(r, "stdin_data", &sd, 0) < 0 || arg_str(r, "mode", &mode, 0) < 0 ||
	    arg_int(r, "timeout_ms", &s->timeout_ms, 0) < 0 || (s->has_window = arg_int(r, "window", &s->window, 0)) < 0 ||
	    arg_int(r, "buffer_bytes", &s->buffer_bytes, 0) < 0)
		return -1;
	if (s->timeout_ms < 0 || s->window < 0 || s->window > 0xffffffffLL || s->buffer_bytes < 0 ||
	    s->buffer_bytes > (8 << 20))
		return req_err(r, "invalid_argument", "timeout_ms, window or buffer_bytes out of range");
	if (!s->buffer_bytes)
		s->buffer_bytes = 1 << 20;
	s->mode = M_STREAM;
	if (mode && !strcmp(mode, "buffer"))
		s->mode = M_BUFFER;
	else if (mode && strcmp(mode, "stream"))
		return req_err(r, "invalid_argument", "\"mode\" must be \"stream\" or \"buffer\"");
	if (sd) {
		size_t l = strlen(sd);
		s->stdin_data = xmalloc(l / 4 * 3 + 3);
		if (b64_decode(sd, l, s->stdin_data, &s->stdin_len))
			return req_err(r, "invalid_argument", "\"stdin_data\" is not base64");
	}
	s->stdin_pipe = s->stdin_open || sd;
	if (pv && pv->t != J_NULL) {
		const struct jv *rv = jget(pv, "rows"), *cv = jget(pv, "cols");
		if (pv->t != J_OBJ)
			return req_err(r, "invalid_argument", "\"pty\" must be an object");
		s->pty = 1;
		s->rows = rv && rv->t == J_NUM && rv->i > 0 && rv->i < 65536 ? rv->i : 24;
		s->cols = cv && cv->t == J_NUM && cv->i > 0 && cv->i < 65536 ? cv->i : 80;
	}
	struct stat st;
	if (!s->cwd) {
		/* The user's home, if it is there (else / , as login says "No directory"). */
		int home = s->has_user && !stat(s->user.home, &st) && S_ISDIR(st.st_mode);
		s->cwd = home ? s->user.home : "/";
	}
	s->env = xcalloc(1, sizeof *s->env);
	env_set(&s->env, &n, "PATH", 4, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	env_set(&s->env, &n, "HOME", 4, s->has_user ? s->user.home : "/root");
	env_set(&s->env, &n, "LANG", 4, "C.UTF-8");
	env_set(&s->env, &n, "USER", 4, s->has_user ? s->user.name : "root");
	if (s->has_user)
		env_set(&s->env, &n, "LOGNAME", 7, s->user.name);
	if (s->pty)
		env_set(&s->env, &n, "TERM", 4, "xterm-256color");
	if (ev && ev->t != J_NULL) {
		if (ev->t != J_OBJ)
			return req_err(r, "invalid_argument", "\"env\" must be an object of strings");
		for (size_t i = 0; i < ev->n; i++) {
			const struct jv *v = ev->items[i];
			const char *k = ev->keys[i];
			if (v->t != J_STR || strlen(v->s) != v->n || !*k || strchr(k, '='))
				return req_err(r, "invalid_argument", "bad \"env\" entry \"%s\"", k);
			env_set(&s->env, &n, k, strlen(k), v->s);
		}
	}
	if (stat(s->cwd, &st) || !S_ISDIR(st.st_mode))
		return req_err(r, "cwd_not_found", "cwd %s: not a directory", s->cwd);
	return 0;
}

static void render_desc(struct proc *p, const struct req *r, char **argv)
{
	struct buf b = {0};
	struct jw w;
	const struct jv *cmd = jget(r->a, "cmd"), *av = jget(r->a, "argv");
	jw_init(&w, &b);
	if (av && av->t == J_ARR) {
		jw_key(&w, "argv");
		jw_arr(&w);
		for (size_t i = 0; argv[i]; i++)
			jw_str(&w, argv[i]);
		jw_end_arr(&w);
	} else {
		jw_kstr(&w, "cmd", cmd->s);
	}
	buf_addc(&b, 0);
	p->desc = xstrdup(buf_data(&b));
	buf_free(&b);
}

static int spawn(struct req *r, struct spec *s)
{
	int errp[2] = {-1, -1}, inp[2] = {-1, -1}, outp[2] = {-1, -1}, errpp[2] = {-1, -1}, master = -1;
	char cgprocs[96];
	struct proc *p = xcalloc(1, sizeof *p);
	pid_t pid;

	p->id = next_id++;
	if (g_cgroup) {
		snprintf(p->cg, sizeof p->cg, CG_ROOT "/p%llu", (unsigned long long)p->id);
		if (mkdir(p->cg, 0755) && errno != EEXIST)
			p->cg[0] = 0; /* no cgroup: fall back to process-group kills */
	}
	snprintf(cgprocs, sizeof cgprocs, "%s/cgroup.procs", p->cg);
	if (pipe2(errp, O_CLOEXEC))
		goto fail_errno;
	if (s->pty) {
		struct winsize ws = {.ws_row = s->rows, .ws_col = s->cols};
		pid = forkpty(&master, NULL, NULL, &ws);
		if (pid == 0)
			child_exec(p->cg[0] ? cgprocs : NULL, s->cwd, s->argv, s->env, errp[1], s->has_user ? &s->user : NULL, 1);
		if (pid > 0)
			fcntl(master, F_SETFD, FD_CLOEXEC);
	} else {
		if (pipe2(outp, O_CLOEXEC) || pipe2(errpp, O_CLOEXEC) || (s->stdin_pipe && pipe2(inp, O_CLOEXEC)))
			goto fail_errno;
		pid = fork();
		if (pid == 0) {
			setsid();
			int in = inp[0] >= 0 ? inp[0] : open("/dev/null", O_RDONLY);
			dup2(in, 0);
			dup2(outp[1], 1);
			dup2(errpp[1], 2);
			child_exec(p->cg[0] ? cgprocs : NULL, s->cwd, s->argv, s->env, errp[1], s->has_user ? &s->user : NULL, 0);
		}
	}
	if (pid < 0)
		goto fail_errno;
	close(errp[1]);
	errp[1] = -1;
	struct child_err ce;
	ssize_t n;
	do
		n = read(errp[0], &ce, sizeof ce);
	while (n < 0 && errno == EINTR);
	close(errp[0]);
	errp[0] = -1;
	if (n == sizeof ce) {
		/* Reap it right away; it has nothing left to do but exit. */
		waitpid(pid, NULL, 0);
		if (ce.stage == 1)
			req_err(r, "cwd_not_found", "chdir %s: %s", s->cwd, strerror(ce.err));
		else if (ce.stage == 3)
			req_err(r, errno_code(ce.err), "cannot run as %s: %s", s->user.name, strerror(ce.err));
		else if (s->via_shell && ce.err == ENOENT)
			/* An image with no shell: its own binaries still run, as an argv. */
			req_err(r, "not_found", "%s: %s: this machine has no shell, so run a command as an argv", s->argv[0], strerror(ce.err));
		else
			req_err(r, "not_found", "%s: %s", s->argv[0], strerror(ce.err));
		goto fail;
	}
	p->pid = pid;
	p->req_id = r->id;
	p->mode = s->mode;
	p->pty = s->pty;
	p->running = 1;
	p->started_ms = real_ms();
	p->deadline = s->timeout_ms ? mono_ms() + s->timeout_ms : 0;
	p->buffer_bytes = s->buffer_bytes;
	p->out_fd[0] = -1;
	p->in_fd = -1;
	for (int ch = 0; ch < 3; ch++) {
		p->drain_left[ch] = -1;
		p->credit[ch] = s->has_window ? s->window : 262144;
		p->ring[ch].max = p->buffer_bytes;
	}
	if (s->pty) {
		p->out_fd[1] = master;
		p->out_fd[2] = -1;
		p->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
		set_nonblock(master);
	} else {
		close(outp[1]);
		close(errpp[1]);
		p->out_fd[1] = outp[0];
		p->out_fd[2] = errpp[0];
		set_nonblock(outp[0]);
		set_nonblock(errpp[0]);
		if (inp[0] >= 0) {
			close(inp[0]);
			p->in_fd = inp[1];
			set_nonblock(inp[1]);
		}
	}
	render_desc(p, r, s->argv);
	p->next = g_procs;
	g_procs = p;
	if (s->stdin_len)
		proc_stdin_queue(p, s->stdin_data, s->stdin_len);
	if (!s->stdin_open && !s->pty && p->in_fd >= 0) {
		p->in_eof = 1; /* stdin_data only: EOF after it */
		proc_stdin_queue(p, "", 0);
	}
	jw_kint(r->w, "proc", p->id);
	jw_kint(r->w, "pid", pid);
	if (p->mode == M_STREAM && (s->stdin_open || s->pty))
		jw_kint(r->w, "window", STDIN_WINDOW);
	return 0;

fail_errno:
	req_err(r, "io_error", "spawn: %s", strerror(errno));
fail:
	for (int i = 0; i < 2; i++) {
		if (errp[i] >= 0)
			close(errp[i]);
		if (inp[i] >= 0)
			close(inp[i]);
		if (outp[i] >= 0)
			close(outp[i]);
		if (errpp[i] >= 0)
			close(errpp[i]);
	}
	if (master >= 0)
		close(master);
	if (p->cg[0])
		rmdir(p->cg);
	free(p);
	return -1;
}

int op_exec(struct req *r)
{
	struct spec s = {0};
	int rc = parse(r, &s);
	if (!rc)
		rc = spawn(r, &s);
	strv_free(s.argv);
	strv_free(s.env);
	free(s.stdin_data);
	return rc;
}
