/* Entry point, the poll() event loop and request dispatch. */
#define _GNU_SOURCE
#include "agent.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

int g_cgroup = 1;

struct went {
	int kind, ch;
	void *ptr;
};
static struct pollfd *pfds;
static struct went *wents;
static size_t nw, capw;
static int64_t wake_at;

void watch(int fd, short events, int kind, void *ptr, int ch)
{
	if (nw == capw) {
		capw = capw ? capw * 2 : 64;
		pfds = xrealloc(pfds, capw * sizeof *pfds);
		wents = xrealloc(wents, capw * sizeof *wents);
	}
	pfds[nw] = (struct pollfd){.fd = fd, .events = events};
	wents[nw] = (struct went){kind, ch, ptr};
	nw++;
}

void timer_at(int64_t t)
{
	if (wake_at < 0 || t < wake_at)
		wake_at = t;
}

/* ---- request helpers ---- */

int req_err(struct req *r, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof r->msg, fmt, ap);
	va_end(ap);
	r->code = code;
	return -1;
}

const char *errno_code(int e)
{
	switch (e) {
	case ENOENT: return "file_not_found";
	case ENOTDIR: return "not_a_directory";
	case EISDIR: return "is_a_directory";
	case EEXIST: return "already_exists";
	case ENOTEMPTY: return "not_empty";
	case EACCES: case EPERM: case EROFS: return "permission_denied";
	case EINVAL: case ENAMETOOLONG: case ELOOP: return "invalid_argument";
	default: return "io_error";
	}
}

int req_errno(struct req *r, int e, const char *what)
{
	return req_err(r, errno_code(e), "%s: %s", what, strerror(e));
}

int arg_str(struct req *r, const char *k, const char **out, int required)
{
	const struct jv *v = jget(r->a, k);
	if (!v || v->t == J_NULL) {
		if (required)
			return req_err(r, "invalid_argument", "missing \"%s\"", k);
		return 0;
	}
	if (v->t != J_STR || strlen(v->s) != v->n)
		return req_err(r, "invalid_argument", "\"%s\" must be a string", k);
	*out = v->s;
	return 1;
}

int arg_int(struct req *r, const char *k, int64_t *out, int required)
{
	const struct jv *v = jget(r->a, k);
	if (!v || v->t == J_NULL) {
		if (required)
			return req_err(r, "invalid_argument", "missing \"%s\"", k);
		return 0;
	}
	if (v->t != J_NUM || !v->is_int)
		return req_err(r, "invalid_argument", "\"%s\" must be an integer", k);
	*out = v->i;
	return 1;
}

int arg_bool(struct req *r, const char *k, int *out)
{
	const struct jv *v = jget(r->a, k);
	if (!v || v->t == J_NULL)
		return 0;
	if (v->t != J_BOOL)
		return req_err(r, "invalid_argument", "\"%s\" must be a boolean", k);
	*out = v->b;
	return 1;
}

int arg_path(struct req *r, const char *k, const char **out)
{
	int rc = arg_str(r, k, out, 1);
	if (rc < 0)
		return rc;
	if ((*out)[0] != '/')
		return req_err(r, "invalid_argument", "\"%s\" must be an absolute path", k);
	return 1;
}

void send_res_ok(uint32_t id, const struct buf *fields)
{
	struct buf b = {0};
	buf_adds(&b, "{\"ok\":true");
	if (fields && buf_size(fields)) {
		buf_addc(&b, ',');
		buf_add(&b, buf_data(fields), buf_size(fields));
	}
	buf_addc(&b, '}');
	out_json(F_RES, id, &b);
	buf_free(&b);
}

static int op_noop(struct req *r)
{
	(void)r;
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(struct req *);
} ops[] = {
	{"sys.hello", op_sys_hello}, {"sys.ping", op_noop}, {"sys.quiesce", op_noop},
	{"sys.clock", op_sys_clock}, {"sys.entropy", op_sys_entropy}, {"sys.limits", op_sys_limits},
	{"sys.info", op_sys_info}, {"exec", op_exec}, {"proc.list", op_proc_list},
	{"proc.read", op_proc_read}, {"proc.wait", op_proc_wait}, {"proc.stdin", op_proc_stdin},
	{"proc.signal", op_proc_signal}, {"proc.kill", op_proc_kill}, {"proc.release", op_proc_release},
	{"pty.resize", op_pty_resize}, {"file.read", op_file_read}, {"file.write", op_file_write},
	{"file.stat", op_file_stat}, {"file.list", op_file_list}, {"file.mkdir", op_file_mkdir},
	{"file.remove", op_file_remove}, {"file.rename", op_file_rename}, {"stream.cancel", op_stream_cancel},
	{"tcp.connect", op_tcp_connect}, {"net.ports", op_net_ports}, {"file.setxattr", op_file_setxattr},
	{"file.getxattrs", op_file_getxattrs}, {"sys.metrics", op_sys_metrics},
	{"vol.mount", op_vol_mount}, {"vol.release", op_vol_release}, {"vol.detach", op_vol_detach},
	{"vol.grow", op_vol_grow}, {"net.setup", op_net_setup},
};

static void handle_req(uint32_t id, const char *p, size_t n)
{
	struct jarena *arena = NULL;
	struct buf b = {0};
	struct jw w;
	struct req r = {.id = id};
	int rc = -1;
	const char *op;

	r.a = json_parse(p, n, &arena);
	jw_init(&w, &b);
	r.w = &w;
	jw_obj(&w);
	jw_kbool(&w, "ok", 1);
	if (!r.a || r.a->t != J_OBJ) {
		req_err(&r, "invalid_argument", "malformed JSON request");
	} else if (arg_str(&r, "op", &op, 1) > 0) {
		size_t i;
		for (i = 0; i < sizeof ops / sizeof ops[0]; i++)
			if (!strcmp(ops[i].name, op))
				break;
		if (i == sizeof ops / sizeof ops[0])
			req_err(&r, "unknown_op", "unknown op \"%s\"", op);
		else
			rc = ops[i].fn(&r);
	}
	if (rc == 0) {
		jw_end_obj(&w);
		out_json(F_RES, id, &b);
	} else if (rc < 0) {
		buf_clear(&b);
		jw_init(&w, &b);
		jw_obj(&w);
		jw_kbool(&w, "ok", 0);
		jw_kstr(&w, "code", r.code ? r.code : "io_error");
		jw_kstr(&w, "message", r.msg);
		jw_end_obj(&w);
		out_json(F_RES, id, &b);
	}
	buf_free(&b);
	jarena_free(arena);
}

void handle_frame(int type, uint32_t id, const char *p, size_t n)
{
	switch (type) {
	case F_REQ:
		handle_req(id, p, n);
		break;
	case F_DATA:
		if (n < 1)
			break;
		/* Channel 0 is an exec's stdin or a tunnel's host->guest bytes: the id tells. */
		if (p[0] == CH_STDIN && !tunnel_on_data(id, p + 1, n - 1))
			proc_on_data(id, p + 1, n - 1);
		else if (p[0] == CH_FILE)
			file_on_data(id, p + 1, n - 1);
		break;
	case F_EOF:
		if (n >= 1 && p[0] == CH_STDIN && !tunnel_on_eof(id))
			proc_on_eof(id);
		else if (n >= 1 && p[0] == CH_FILE)
			file_on_eof(id);
		break;
	case F_CREDIT: {
		if (n < 5)
			break;
		const unsigned char *u = (const unsigned char *)p;
		uint32_t v = (uint32_t)u[1] << 24 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 8 | u[4];
		if (u[0] == CH_STDOUT && tunnel_on_credit(id, v))
			break;
		if (u[0] == CH_STDOUT || u[0] == CH_STDERR)
			proc_on_credit(id, u[0], v);
		else if (u[0] == CH_FILE)
			file_on_credit(id, v);
		break;
	}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: den-agent [--init] [--socket PATH] [--no-cgroup]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *sock = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--init"))
			return init_main(argv[0]);
		else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			sock = argv[++i];
		else if (!strcmp(argv[i], "--no-cgroup"))
			g_cgroup = 0;
		else
			usage();
	}
	/* Children get dup2'd stdio; make sure 0-2 are taken so no pipe lands there. */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
			return 1;
	signal(SIGPIPE, SIG_IGN);
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGCHLD);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	int sigfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) {
		logmsg("signalfd: %s", strerror(errno));
		return 1;
	}
	umask(022);
	/* The agent must survive a runaway exec: never the OOM killer's choice. */
	write_str("/proc/self/oom_score_adj", "-1000");
	if (g_cgroup)
		cgroup_setup();
	proc_init();
	conn_init(sock);

	for (;;) {
		int64_t now = mono_ms();
		conn_tick(now);
		proc_tick(now);
		files_tick();
		tunnels_tick(now);
		conn_process_input();
		conn_flush();

		nw = 0;
		wake_at = -1;
		watch(sigfd, POLLIN, W_SIG, NULL, 0);
		conn_prepare();
		proc_prepare();
		files_prepare();
		tunnels_prepare();
		int timeout = -1;
		if (wake_at >= 0) {
			int64_t d = wake_at - mono_ms();
			timeout = d < 0 ? 0 : d > 60000 ? 60000 : (int)d;
		}
		int n = poll(pfds, nw, timeout);
		if (n < 0) {
			if (errno != EINTR)
				logmsg("poll: %s", strerror(errno));
			continue;
		}
		/* Handlers never free what a later entry points to: frees happen in the ticks. */
		for (size_t i = 0; i < nw && n > 0; i++) {
			short rev = pfds[i].revents;
			if (!rev)
				continue;
			n--;
			switch (wents[i].kind) {
			case W_SIG: proc_sigchld(sigfd); break;
			case W_CONN: conn_event(rev); break;
			case W_FREAD: files_event(wents[i].ptr, rev); break;
			case W_TUNNEL: tunnels_event(wents[i].ptr, rev); break;
			default: proc_event(wents[i].kind, wents[i].ptr, wents[i].ch, rev); break;
			}
		}
		conn_process_input();
	}
}
