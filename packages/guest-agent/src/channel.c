/* The host connection: virtio-serial port discovery (or a unix socket for testing),
 * hangup handling, frame parsing and the output queue. */
#define _GNU_SOURCE
#include "agent.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

enum { C_DOWN, C_UP, C_HUP };

static struct {
	int fd, state;
	const char *sock; /* NULL: virtio port */
	int64_t retry_at;
	int last_err;
	struct buf in, out;
} c = {.fd = -1};

void handle_frame(int type, uint32_t id, const char *p, size_t n); /* main.c */

void conn_init(const char *socket_path)
{
	c.sock = socket_path;
	c.state = C_DOWN;
	c.retry_at = 0;
}

int conn_up(void) { return c.state == C_UP; }
size_t outq_size(void) { return buf_size(&c.out); }
int out_room(void) { return c.state == C_UP && buf_size(&c.out) < OUTQ_SOFT; }
void out_clear(void) { buf_clear(&c.out); }

static void note_err(const char *what, int err)
{
	/* Log each distinct failure once, not every retry (the console is slow). */
	if (err != c.last_err)
		logmsg("%s: %s", what, strerror(err));
	c.last_err = err;
}

static int open_port(void)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *e;
	char path[300], name[64];
	if (!d)
		return -ENOENT;
	int fd = -ENOENT;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
		ssize_t l = read_small(path, name, sizeof name);
		while (l > 0 && (name[l - 1] == '\n' || name[l - 1] == ' '))
			name[--l] = 0;
		if (l <= 0 || strcmp(name, "den.agent"))
			continue;
		snprintf(path, sizeof path, "/dev/%s", e->d_name);
		fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
		if (fd < 0)
			fd = -errno;
		break;
	}
	closedir(d);
	return fd;
}

static int open_socket(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", c.sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	set_nonblock(fd);
	return fd;
}

/* Host went away: everything in flight belongs to a dead connection. */
static void reset_io(void)
{
	buf_clear(&c.in);
	buf_clear(&c.out);
	files_abort_all();
	tunnels_abort_all();
}

static void hangup(int64_t now)
{
	reset_io();
	if (c.sock || c.state == C_DOWN) {
		if (c.fd >= 0)
			close(c.fd);
		c.fd = -1;
		c.state = C_DOWN;
	} else {
		/* virtio port: keep it open; POLLHUP persists until the host reconnects, so
		 * take it out of the poll set and re-check it periodically. */
		c.state = C_HUP;
	}
	c.retry_at = now + 50;
}

void conn_tick(int64_t now)
{
	if (c.state == C_DOWN && now >= c.retry_at) {
		int fd = c.sock ? open_socket() : open_port();
		if (fd < 0) {
			note_err(c.sock ? "connect" : "open port", -fd);
			c.retry_at = now + (c.sock ? 50 : 200);
			return;
		}
		c.last_err = 0;
		c.fd = fd;
		c.state = C_UP;
	} else if (c.state == C_HUP && now >= c.retry_at) {
		struct pollfd p = {.fd = c.fd, .events = POLLIN};
		if (poll(&p, 1, 0) < 0)
			return;
		if (p.revents & (POLLERR | POLLNVAL)) {
			/* Port unplugged: rediscover it. */
			close(c.fd);
			c.fd = -1;
			c.state = C_DOWN;
			c.retry_at = now + 200;
			return;
		}
		if (p.revents & POLLHUP) {
			/* Still disconnected: whatever is readable is a stale tail of the old
			 * connection. Once POLLHUP clears, readable bytes are the new host's
			 * hello and must be kept. The host may reconnect between poll() and
			 * read(), so read into the input buffer and decide after a re-poll. */
			if (p.revents & POLLIN) {
				for (;;) {
					buf_reserve(&c.in, 65536);
					ssize_t r = read(c.fd, c.in.p + c.in.len, 65536);
					if (r <= 0)
						break;
					c.in.len += r;
				}
				if (poll(&p, 1, 0) < 0)
					p.revents = POLLHUP;
			}
		}
		if (p.revents & POLLHUP) {
			buf_clear(&c.in);
			c.retry_at = now + 50;
		} else {
			c.state = C_UP;
		}
	}
}

void conn_prepare(void)
{
	if (c.state == C_UP) {
		short ev = 0;
		if (buf_size(&c.out) < OUTQ_HARD)
			ev |= POLLIN;
		if (buf_size(&c.out))
			ev |= POLLOUT;
		watch(c.fd, ev, W_CONN, NULL, 0);
	} else {
		timer_at(c.retry_at);
	}
}

void conn_event(short rev)
{
	int64_t now = mono_ms();
	if (c.state != C_UP)
		return;
	if (rev & (POLLERR | POLLNVAL) && !(rev & POLLIN)) {
		if (!c.sock) {
			/* Force rediscovery of the port. */
			close(c.fd);
			c.fd = -1;
			c.state = C_DOWN;
		}
		hangup(now);
		return;
	}
	if (rev & (POLLIN | POLLHUP)) {
		/* Bounded per wakeup so one busy peer can't starve everything else. With
		 * POLLHUP, read even when the queue is full: only read() tells whether the
		 * host is really gone, and not consuming POLLHUP would spin. */
		for (int i = 0; i < 4 && (buf_size(&c.out) < OUTQ_HARD || (rev & POLLHUP)); i++) {
			buf_reserve(&c.in, 65536);
			ssize_t r = read(c.fd, c.in.p + c.in.len, 65536);
			if (r > 0) {
				c.in.len += r;
				continue;
			}
			if (r < 0 && errno == EINTR)
				continue;
			if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
				hangup(now);
				return;
			}
			/* EAGAIN with POLLHUP set: the host reconnected after poll() returned
			 * (a restore sends close then open); only read() == 0 means gone. */
			break;
		}
	}
	if (rev & POLLOUT)
		conn_flush();
}

void conn_flush(void)
{
	while (c.state == C_UP && buf_size(&c.out)) {
		ssize_t r = write(c.fd, buf_data(&c.out), buf_size(&c.out));
		if (r > 0) {
			buf_consume(&c.out, r);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		hangup(mono_ms());
		return;
	}
	if (!buf_size(&c.out))
		buf_clear(&c.out); /* release a big allocation after a burst */
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

void conn_process_input(void)
{
	while (c.state == C_UP && buf_size(&c.in) >= 4 && buf_size(&c.out) < OUTQ_HARD) {
		const unsigned char *p = (const unsigned char *)buf_data(&c.in);
		uint32_t len = be32(p);
		if (len < 5 || len - 5 > MAX_PAYLOAD || (buf_size(&c.in) >= 5 && (p[4] < F_REQ || p[4] > F_CREDIT ||
		                                                                p[4] == F_RES || p[4] == F_EVENT))) {
			/* Only a broken host sends this: drop everything and wait for a hello. */
			logmsg("bad frame from host (len %u), resyncing", len);
			reset_io();
			return;
		}
		if (buf_size(&c.in) < 4 + (size_t)len)
			return;
		handle_frame(p[4], be32(p + 5), (const char *)p + 9, len - 5);
		buf_consume(&c.in, 4 + len);
	}
	if (!buf_size(&c.in))
		buf_clear(&c.in);
}

void out_raw(const void *p, size_t n)
{
	if (c.state == C_UP)
		buf_add(&c.out, p, n);
}

static void header(unsigned char *h, size_t n, int type, uint32_t id)
{
	put32(h, n + 5);
	h[4] = type;
	put32(h + 5, id);
}

void out_frame(int type, uint32_t id, const void *p, size_t n)
{
	unsigned char h[9];
	/* Frames produced while disconnected would be dropped by the next hello anyway. */
	if (c.state != C_UP)
		return;
	header(h, n, type, id);
	buf_add(&c.out, h, 9);
	buf_add(&c.out, p, n);
}

void out_json(int type, uint32_t id, const struct buf *json)
{
	out_frame(type, id, buf_data(json), buf_size(json));
}

void out_eof(uint32_t id, int ch)
{
	unsigned char b = ch;
	out_frame(F_EOF, id, &b, 1);
}

void out_credit(uint32_t id, int ch, uint32_t n)
{
	unsigned char b[5];
	b[0] = ch;
	put32(b + 1, n);
	out_frame(F_CREDIT, id, b, 5);
}

ssize_t out_data_from_fd(uint32_t id, int ch, int fd, size_t max)
{
	if (c.state != C_UP) {
		errno = EAGAIN;
		return -1;
	}
	if (max > DATA_MAX)
		max = DATA_MAX;
	buf_reserve(&c.out, 10 + max);
	unsigned char *h = (unsigned char *)c.out.p + c.out.len;
	ssize_t r;
	do
		r = read(fd, h + 10, max);
	while (r < 0 && errno == EINTR);
	if (r > 0) {
		header(h, r + 1, F_DATA, id);
		h[9] = ch;
		c.out.len += 10 + r;
	}
	return r;
}
