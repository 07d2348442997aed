#define _GNU_SOURCE
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t real_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void logmsg(const char *fmt, ...)
{
	char tmp[512];
	int n = snprintf(tmp, sizeof tmp, "den-agent: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp + n, sizeof tmp - n - 1, fmt, ap);
	va_end(ap);
	size_t l = strlen(tmp);
	tmp[l++] = '\n';
	/* Best effort: stderr may be the slow serial console. */
	ssize_t r = write(2, tmp, l);
	(void)r;
}

static void oom(void)
{
	static const char m[] = "den-agent: out of memory\n";
	ssize_t r = write(2, m, sizeof m - 1);
	(void)r;
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (!p)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t b64_enc_len(size_t n) { return (n + 2) / 3 * 4; }

void b64_encode(const unsigned char *in, size_t n, char *out)
{
	size_t i = 0;
	for (; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		*out++ = b64chars[v >> 18];
		*out++ = b64chars[(v >> 12) & 63];
		*out++ = b64chars[(v >> 6) & 63];
		*out++ = b64chars[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
		*out++ = b64chars[v >> 18];
		*out++ = b64chars[(v >> 12) & 63];
		*out++ = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
		*out++ = '=';
	}
}

static int b64val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

int b64_decode(const char *in, size_t n, unsigned char *out, size_t *outlen)
{
	uint32_t acc = 0;
	int bits = 0;
	size_t o = 0, i = 0;
	for (; i < n && in[i] != '='; i++) {
		int v = b64val((unsigned char)in[i]);
		if (v < 0)
			return -1;
		acc = acc << 6 | v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (acc >> bits) & 0xff;
		}
	}
	for (; i < n; i++)
		if (in[i] != '=')
			return -1;
	*outlen = o;
	return 0;
}

int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t l = strlen(s), r = write(fd, s, l);
	int e = r == l ? 0 : (r < 0 ? -errno : -EIO);
	close(fd);
	return e;
}

ssize_t read_small(const char *path, char *out, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t n = 0;
	while (n + 1 < cap) {
		ssize_t r = read(fd, out + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += r;
	}
	close(fd);
	out[n] = 0;
	return n;
}

int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t r = write(fd, c, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += r;
		n -= r;
	}
	return 0;
}

void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}
