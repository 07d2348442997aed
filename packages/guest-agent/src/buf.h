/* Growable byte buffer. Valid bytes are p[off..len): consuming from the front is O(1). */
#ifndef DEN_BUF_H
#define DEN_BUF_H
#include <stddef.h>

struct buf {
	char *p;
	size_t off, len, cap;
};

void buf_reserve(struct buf *b, size_t extra);
void buf_add(struct buf *b, const void *d, size_t n);
void buf_adds(struct buf *b, const char *s);
void buf_addc(struct buf *b, char c);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_consume(struct buf *b, size_t n);
void buf_clear(struct buf *b);
void buf_free(struct buf *b);

static inline size_t buf_size(const struct buf *b) { return b->len - b->off; }
static inline char *buf_data(const struct buf *b) { return b->p + b->off; }
#endif
