#define _GNU_SOURCE
#include "buf.h"
#include "util.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_reserve(struct buf *b, size_t extra)
{
	if (b->len + extra <= b->cap)
		return;
	/* Reclaim consumed space before growing. */
	if (b->off) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + extra <= b->cap)
			return;
	}
	size_t nc = b->cap ? b->cap : 256;
	while (nc < b->len + extra)
		nc *= 2;
	b->p = xrealloc(b->p, nc);
	b->cap = nc;
}

void buf_add(struct buf *b, const void *d, size_t n)
{
	if (!n)
		return;
	buf_reserve(b, n);
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

void buf_adds(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }

void buf_addc(struct buf *b, char c)
{
	buf_reserve(b, 1);
	b->p[b->len++] = c;
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	char tmp[256];
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof tmp) {
		buf_add(b, tmp, n);
		return;
	}
	buf_reserve(b, n + 1);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, n + 1, fmt, ap);
	va_end(ap);
	b->len += n;
}

void buf_consume(struct buf *b, size_t n)
{
	b->off += n;
	if (b->off >= b->len)
		b->off = b->len = 0;
}

void buf_clear(struct buf *b)
{
	b->off = b->len = 0;
	/* Don't keep a big allocation around after a burst (keeps RSS bounded). */
	if (b->cap > (256u << 10)) {
		free(b->p);
		b->p = NULL;
		b->cap = 0;
	}
}

void buf_free(struct buf *b)
{
	free(b->p);
	b->p = NULL;
	b->off = b->len = b->cap = 0;
}
