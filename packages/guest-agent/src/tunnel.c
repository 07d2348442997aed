/* TCP tunnels: the host reaches a server listening on the guest's loopback through the
 * agent, so it works even when the guest has no network at all. One tunnel per
 * tcp.connect request: DATA ch=1 guest->host within the host's credit, DATA ch=0
 * host->guest within ours. Also net.ports, the listening sockets a tunnel could reach. */
#define _GNU_SOURCE
#include "agent.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TUNNEL_MAX 256
/* host->guest credit: the most a tunnel buffers when its server does not read. */
#define TUNNEL_WINDOW (256u << 10)
#define READ_WINDOW_DEFAULT 262144
#define CONNECT_TIMEOUT_MS 5000
#define PORTS_MAX 1024
/* /proc/<pid>/fd entries net.ports looks at: a guest with a huge fd table must not
 * stall the event loop (attribution is best effort). */
#define FD_SCAN_BUDGET 65536

enum { T_CONNECTING, T_OPEN };

struct tunnel {
	struct tunnel *next;
	uint32_t id;
	int fd, state, dead;
	int port, v6;
	int fallback;          /* no host given: try ::1 when 127.0.0.1 refuses */
	struct in_addr addr4;  /* when !v6 (v6 is always ::1) */
	int64_t deadline;      /* connecting: give up then */
	uint64_t credit;       /* ch1 bytes the host still accepts */
	struct buf in_q;       /* host bytes the socket has not taken yet */
	int rd_eof;            /* the server finished sending; EOF ch1 sent */
	int wr_eof;            /* the host finished sending; shut our side once in_q is out */
	int wr_done;           /* shutdown(SHUT_WR) done */
};
static struct tunnel *tunnels;

static void send_res_err(uint32_t id, const char *code, const char *msg)
{
	struct buf b = {0};
	struct jw w;
	jw_init(&w, &b);
	jw_obj(&w);
	jw_kbool(&w, "ok", 0);
	jw_kstr(&w, "code", code);
	jw_kstr(&w, "message", msg);
	jw_end_obj(&w);
	out_json(F_RES, id, &b);
	buf_free(&b);
}

/* Closes the socket; the tunnel is unlinked and freed from tunnels_tick (never
 * mid-dispatch: the poll set may still point at it). rst: abort, don't linger. */
static void drop(struct tunnel *t, int rst)
{
	if (t->dead)
		return;
	if (t->fd >= 0) {
		if (rst) {
			struct linger l = {.l_onoff = 1, .l_linger = 0};
			setsockopt(t->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
		}
		close(t->fd);
	}
	t->fd = -1;
	buf_free(&t->in_q);
	t->dead = 1;
}

/* The last frame of an open tunnel. */
static void closed(struct tunnel *t, const char *err)
{
	struct buf b = {0};
	struct jw w;
	jw_init(&w, &b);
	jw_obj(&w);
	jw_kstr(&w, "event", "closed");
	if (err)
		jw_kstr(&w, "error", err);
	jw_end_obj(&w);
	out_json(F_EVENT, t->id, &b);
	buf_free(&b);
	drop(t, err != NULL);
}

static void fail(struct tunnel *t, const char *what, int err)
{
	char msg[160];
	snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
	closed(t, msg);
}

static void maybe_done(struct tunnel *t)
{
	if (!t->dead && t->rd_eof && t->wr_done)
		closed(t, NULL);
}

static struct tunnel *find(uint32_t id)
{
	for (struct tunnel *t = tunnels; t; t = t->next)
		if (!t->dead && t->id == id)
			return t;
	return NULL;
}

/* Starts a non-blocking connect to the current address. 0 (in progress or done) or errno. */
static int start_connect(struct tunnel *t)
{
	struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(t->port), .sin_addr = t->addr4};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(t->port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	int fd = socket(t->v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	int rc = t->v6 ? connect(fd, (struct sockaddr *)&a6, sizeof a6) : connect(fd, (struct sockaddr *)&a4, sizeof a4);
	if (rc < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		return e;
	}
	t->fd = fd;
	return 0;
}

/* 127.0.0.1 refused and the host named no address: the server may listen on ::1 only.
 * Returns the error to report, or 0 when the retry is under way. */
static int retry_v6(struct tunnel *t, int err)
{
	if (err != ECONNREFUSED || !t->fallback || t->v6)
		return err;
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	t->v6 = 1;
	int e = start_connect(t);
	/* No IPv6 in the guest: the answer is still 127.0.0.1's refusal. */
	return e == EADDRNOTAVAIL || e == EAFNOSUPPORT || e == ENETUNREACH ? ECONNREFUSED : e;
}

static const char *connect_code(int err)
{
	return err == ECONNREFUSED ? "connection_refused" : err == ETIMEDOUT ? "timeout" : "io_error";
}

static void connect_error(struct tunnel *t, int err)
{
	char msg[160];
	snprintf(msg, sizeof msg, "connect to port %d: %s", t->port, strerror(err));
	send_res_err(t->id, connect_code(err), msg);
	drop(t, 0);
}

/* The socket became writable (or failed) while connecting. */
static void connect_done(struct tunnel *t)
{
	int err = 0;
	socklen_t l = sizeof err;
	if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &l))
		err = errno;
	if (err) {
		err = retry_v6(t, err);
		if (err)
			connect_error(t, err);
		return;
	}
	t->state = T_OPEN;
	struct buf b = {0};
	buf_printf(&b, "\"window\":%u", TUNNEL_WINDOW);
	send_res_ok(t->id, &b);
	buf_free(&b);
}

/* Server -> host, one DATA frame within credit. */
static void read_sock(struct tunnel *t)
{
	size_t want = t->credit < DATA_MAX ? t->credit : DATA_MAX;
	if (!want || t->rd_eof || !out_room())
		return;
	ssize_t r = out_data_from_fd(t->id, CH_STDOUT, t->fd, want);
	if (r > 0) {
		t->credit -= r;
	} else if (r == 0) {
		t->rd_eof = 1;
		out_eof(t->id, CH_STDOUT);
		maybe_done(t);
	} else if (errno != EAGAIN && errno != EINTR) {
		fail(t, "read", errno);
	}
}

/* Host -> server: hands the socket what it takes, crediting the host as it goes. */
static void write_sock(struct tunnel *t)
{
	while (buf_size(&t->in_q)) {
		ssize_t r = send(t->fd, buf_data(&t->in_q), buf_size(&t->in_q), MSG_NOSIGNAL);
		if (r > 0) {
			buf_consume(&t->in_q, r);
			out_credit(t->id, CH_STDIN, r);
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			return;
		} else {
			fail(t, "write", errno);
			return;
		}
	}
	buf_clear(&t->in_q);
	if (t->wr_eof && !t->wr_done) {
		shutdown(t->fd, SHUT_WR);
		t->wr_done = 1;
		maybe_done(t);
	}
}

static int can_read(const struct tunnel *t)
{
	return !t->rd_eof && t->credit && out_room();
}

void tunnels_tick(int64_t now)
{
	for (struct tunnel **tt = &tunnels; *tt;) {
		struct tunnel *t = *tt;
		if (!t->dead && t->state == T_CONNECTING && now >= t->deadline)
			connect_error(t, ETIMEDOUT);
		if (t->dead) {
			*tt = t->next;
			free(t);
			continue;
		}
		tt = &t->next;
	}
}

void tunnels_prepare(void)
{
	for (struct tunnel *t = tunnels; t; t = t->next) {
		if (t->dead)
			continue;
		if (t->state == T_CONNECTING) {
			watch(t->fd, POLLOUT, W_TUNNEL, t, 0);
			timer_at(t->deadline);
			continue;
		}
		short ev = 0;
		if (can_read(t))
			ev |= POLLIN; /* no credit or a full queue: the server's sends block */
		if (buf_size(&t->in_q))
			ev |= POLLOUT;
		/* Idle, still watch for a reset (POLLERR/POLLHUP need no events). Not once our
		 * side is shut: then POLLHUP only says the server finished too, which we learn by
		 * reading, and it would spin while there is no credit to read with. */
		if (ev || !t->wr_done)
			watch(t->fd, ev, W_TUNNEL, t, 0);
	}
}

void tunnels_event(void *ptr, short rev)
{
	struct tunnel *t = ptr;
	if (t->dead)
		return;
	if (t->state == T_CONNECTING) {
		connect_done(t);
		return;
	}
	if (buf_size(&t->in_q) && rev & (POLLOUT | POLLERR | POLLHUP))
		write_sock(t);
	if (t->dead)
		return;
	if (can_read(t) && rev & (POLLIN | POLLERR | POLLHUP)) {
		read_sock(t);
	} else if (rev & (POLLERR | POLLHUP) && !t->wr_done) {
		/* Our side is open, so a hangup is a reset (or a timeout). */
		int err = 0;
		socklen_t l = sizeof err;
		if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &l) || !err)
			err = ECONNRESET;
		fail(t, "socket", err);
	}
}

/* A new host (or the old one gone): nobody will read what these would send. */
void tunnels_abort_all(void)
{
	for (struct tunnel *t = tunnels; t; t = t->next)
		drop(t, 1);
}

/* stream.cancel: the host gave up on the tunnel. A connect still in flight gets its one RES. */
void tunnel_cancel(uint32_t id)
{
	struct tunnel *t = find(id);
	if (!t)
		return;
	if (t->state == T_CONNECTING)
		send_res_err(id, "aborted", "cancelled by the host");
	drop(t, 1);
}

int tunnel_on_data(uint32_t id, const char *p, size_t n)
{
	struct tunnel *t = find(id);
	if (!t)
		return 0;
	if (t->state != T_OPEN || t->wr_eof)
		return 1; /* a confused host: nothing to write it to */
	/* We credit back only what the socket took, so a host within its credit never
	 * has more than the window queued here. */
	if (buf_size(&t->in_q) + n > TUNNEL_WINDOW) {
		closed(t, "host exceeded its credit");
		return 1;
	}
	buf_add(&t->in_q, p, n);
	write_sock(t);
	return 1;
}

int tunnel_on_eof(uint32_t id)
{
	struct tunnel *t = find(id);
	if (!t)
		return 0;
	if (t->state == T_OPEN && !t->wr_eof) {
		t->wr_eof = 1;
		write_sock(t); /* shuts the write side now if nothing is queued */
	}
	return 1;
}

int tunnel_on_credit(uint32_t id, uint32_t n)
{
	struct tunnel *t = find(id);
	if (!t)
		return 0;
	t->credit += n;
	return 1;
}

/* Only the guest's own loopback: a tunnel reaches the guest's servers, it is not a way
 * out through the guest's network. 127.0.0.0/8 or ::1. */
static int parse_host(struct tunnel *t, const char *h)
{
	struct in6_addr a6;
	if (inet_pton(AF_INET, h, &t->addr4) == 1)
		return (ntohl(t->addr4.s_addr) >> 24) == 127 ? 0 : -1;
	if (inet_pton(AF_INET6, h, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6)) {
		t->v6 = 1;
		return 0;
	}
	return -1;
}

int op_tcp_connect(struct req *r)
{
	int64_t port, win = READ_WINDOW_DEFAULT;
	const char *host = NULL;
	int n = 0;
	if (arg_int(r, "port", &port, 1) < 0 || arg_str(r, "host", &host, 0) < 0 || arg_int(r, "window", &win, 0) < 0)
		return -1;
	if (port < 1 || port > 65535)
		return req_err(r, "invalid_argument", "\"port\" must be 1..65535");
	if (win < 0)
		return req_err(r, "invalid_argument", "bad window");
	for (struct tunnel *t = tunnels; t; t = t->next)
		n += !t->dead;
	if (n >= TUNNEL_MAX)
		return req_err(r, "limit_exceeded", "at most %d tunnels may be open", TUNNEL_MAX);
	struct tunnel *t = xcalloc(1, sizeof *t);
	t->id = r->id;
	t->fd = -1;
	t->port = port;
	t->credit = win; /* an explicit 0 waits for CREDIT */
	t->addr4.s_addr = htonl(INADDR_LOOPBACK);
	t->fallback = !host;
	if (host && parse_host(t, host)) {
		free(t);
		return req_err(r, "invalid_argument", "\"host\" must be a loopback address (127.0.0.1 or ::1)");
	}
	int e = start_connect(t);
	if (e)
		e = retry_v6(t, e);
	if (e) {
		if (t->fd >= 0)
			close(t->fd);
		free(t);
		return req_err(r, connect_code(e), "connect to port %d: %s", (int)port, strerror(e));
	}
	t->state = T_CONNECTING;
	t->deadline = mono_ms() + CONNECT_TIMEOUT_MS;
	t->next = tunnels;
	tunnels = t;
	return OP_DEFER; /* RES once the socket is writable (connected) or failed */
}

/* ---- net.ports ---- */

struct lport {
	int port, family;
	unsigned long inode;
	pid_t pid;
	char addr[INET6_ADDRSTRLEN];
	char comm[32];
};

/* /proc/net/tcp prints each address word as the kernel holds it (network order) in %08X:
 * parsed back into a native word, its bytes are the address again. */
static int hex_addr(const char *h, int family, void *out)
{
	int words = family == AF_INET ? 1 : 4;
	uint32_t w[4];
	if (strlen(h) != (size_t)words * 8)
		return -1;
	for (int i = 0; i < words; i++) {
		char part[9];
		memcpy(part, h + 8 * i, 8);
		part[8] = 0;
		w[i] = strtoul(part, NULL, 16);
	}
	memcpy(out, w, words * 4);
	return 0;
}

/* Appends the LISTEN (0A) sockets of one /proc/net table. */
static void scan_table(const char *path, int family, struct lport *v, size_t *n, int *truncated)
{
	char line[512], hex[40];
	unsigned port, st;
	unsigned long inode;
	unsigned char a[16];
	FILE *f = fopen(path, "re");
	if (!f)
		return; /* no IPv6 in this kernel */
	while (fgets(line, sizeof line, f)) {
		/* sl local:port remote:port st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, " %*u: %39[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*u %*u %lu", hex, &port, &st, &inode) != 4)
			continue; /* the header */
		if (st != 0x0A || hex_addr(hex, family, a))
			continue;
		if (*n >= PORTS_MAX) {
			*truncated = 1;
			break;
		}
		struct lport *p = &v[(*n)++];
		memset(p, 0, sizeof *p);
		p->port = port;
		p->family = family == AF_INET ? 4 : 6;
		p->inode = inode;
		inet_ntop(family, a, p->addr, sizeof p->addr);
	}
	fclose(f);
}

static int by_inode(const void *a, const void *b)
{
	unsigned long x = ((const struct lport *)a)->inode, y = ((const struct lport *)b)->inode;
	return x < y ? -1 : x > y;
}

static int by_port(const void *a, const void *b)
{
	const struct lport *x = a, *y = b;
	if (x->port != y->port)
		return x->port - y->port;
	if (x->family != y->family)
		return x->family - y->family;
	return strcmp(x->addr, y->addr);
}

/* Which process holds each socket: the first /proc/<pid>/fd entry "socket:[inode]". */
static void attribute(struct lport *v, size_t n)
{
	size_t left = 0;
	long budget = FD_SCAN_BUDGET;
	struct dirent *e, *fe;
	char path[64], link[64];
	qsort(v, n, sizeof *v, by_inode);
	for (size_t i = 0; i < n; i++)
		left += v[i].inode != 0;
	DIR *d = left ? opendir("/proc") : NULL;
	if (!d)
		return;
	while (left && budget > 0 && (e = readdir(d))) {
		pid_t pid = atoi(e->d_name);
		if (pid <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%d/fd", pid);
		DIR *fds = opendir(path);
		if (!fds)
			continue; /* gone, or not ours to look at */
		while (left && budget-- > 0 && (fe = readdir(fds))) {
			ssize_t l = readlinkat(dirfd(fds), fe->d_name, link, sizeof link - 1);
			if (l <= 8)
				continue;
			link[l] = 0;
			if (strncmp(link, "socket:[", 8))
				continue;
			struct lport key = {.inode = strtoul(link + 8, NULL, 10)};
			struct lport *p = bsearch(&key, v, n, sizeof *v, by_inode);
			/* Duplicate inodes can't happen; a socket shared after fork keeps the first. */
			if (!p || p->pid)
				continue;
			p->pid = pid;
			snprintf(path, sizeof path, "/proc/%d/comm", pid);
			ssize_t cl = read_small(path, p->comm, sizeof p->comm);
			while (cl > 0 && p->comm[cl - 1] == '\n')
				p->comm[--cl] = 0;
			left--;
		}
		closedir(fds);
	}
	closedir(d);
}

int op_net_ports(struct req *r)
{
	struct lport *v = xcalloc(PORTS_MAX, sizeof *v);
	size_t n = 0;
	int truncated = 0;
	scan_table("/proc/net/tcp", AF_INET, v, &n, &truncated);
	if (!truncated)
		scan_table("/proc/net/tcp6", AF_INET6, v, &n, &truncated);
	attribute(v, n);
	qsort(v, n, sizeof *v, by_port);
	jw_key(r->w, "ports");
	jw_arr(r->w);
	for (size_t i = 0; i < n; i++) {
		jw_obj(r->w);
		jw_kint(r->w, "port", v[i].port);
		jw_kstr(r->w, "address", v[i].addr);
		jw_kint(r->w, "family", v[i].family);
		if (v[i].pid) {
			jw_kint(r->w, "pid", v[i].pid);
			if (v[i].comm[0])
				jw_kstr(r->w, "process", v[i].comm);
		}
		jw_end_obj(r->w);
	}
	jw_end_arr(r->w);
	jw_kbool(r->w, "truncated", truncated);
	free(v);
	return 0;
}
