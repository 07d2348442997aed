/* Small helpers: clocks, logging, allocation, base64, tiny file I/O. */
#ifndef DEN_UTIL_H
#define DEN_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

int64_t mono_ms(void);
int64_t real_ms(void);
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

size_t b64_enc_len(size_t n);
/* Writes b64_enc_len(n) chars, no NUL. */
void b64_encode(const unsigned char *in, size_t n, char *out);
/* out must hold n/4*3+3 bytes. Returns 0 or -1 on malformed input. */
int b64_decode(const char *in, size_t n, unsigned char *out, size_t *outlen);

/* Returns 0 or -errno. */
int write_str(const char *path, const char *s);
/* Reads up to cap-1 bytes, NUL-terminates. Returns length or -errno. */
ssize_t read_small(const char *path, char *out, size_t cap);
/* write() all of it, retrying on EINTR/partial writes (blocking fds). 0 or -errno. */
int write_all(int fd, const void *p, size_t n);
void set_nonblock(int fd);
#endif
