/*
 * den-pagefilter: the native twin of migration-stream.ts's keepChangedPages, in its bitmap
 * mode. Reads a QEMU 7.2 migration stream on stdin and writes it to stdout without the
 * pages of RAM block BLOCK whose bit in the bitmap (read whole from descriptor 3 first) is
 * clear: the guest never wrote them, so they are still the template's, over which the
 * stream is loaded. Written in C so the ~150 MB a 512 MiB guest's stream carries never
 * pass through Node (one read and one write per MiB here, no object per chunk there).
 *
 *   den-pagefilter BLOCK RAM_BYTES [--zstd LEVEL | -- COMPRESSOR ARGS...] <stream >filtered 3<bitmap
 *
 * With a compressor (`zstd -1 -c`, say), the filtered stream goes into its stdin and its
 * stdout is this program's: what comes out is compressed, and Node never sees the raw bytes.
 * Built with libzstd (-DDEN_ZSTD -lzstd), `--zstd LEVEL` compresses here instead, into one
 * zstd frame with its content checksum, as `zstd -LEVEL -c` writes it: no second process and
 * no pipe between them.
 *
 * Whatever it does not understand before it dropped a page it passes on unchanged from
 * there on (the output then loads like the input); a surprise after a page was dropped is
 * an error (exit 2), never a stream that would load wrong. On success its last line on
 * stderr is "pages N kept K passed 0|1 in BYTES out BYTES cpu SECONDS" (N: the block's pages
 * seen; out: the filtered bytes, before any compressor; cpu: its own and the compressor's).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef DEN_ZSTD
#include <zstd.h>
#endif

#define FILE_MAGIC 0x5145564du
#define SECTION_START 0x01
#define SECTION_PART 0x02
#define SECTION_END 0x03
#define SUBSECTION 0x05
#define CONFIGURATION 0x07
/* QEMU_VM_COMMAND: QEMU 10 sends MIG_CMD_SWITCHOVER_START (11, no payload) between RAM parts. */
#define COMMAND 0x08
#define CMD_SWITCHOVER_START 11
#define SECTION_FOOTER 0x7e

#define FLAG_ZERO 0x02
#define FLAG_MEM_SIZE 0x04
#define FLAG_PAGE 0x08
#define FLAG_EOS 0x10
#define FLAG_CONTINUE 0x20
#define FLAG_MASK 0xfffu
#define FLAG_UNEXPECTED (~(FLAG_ZERO | FLAG_PAGE | FLAG_EOS | FLAG_CONTINUE) & FLAG_MASK)
#define PAGE 4096

/* Input: a window that always keeps what was consumed since the last take (`mark`). */
#define IN_CAP (8u << 20)
static unsigned char in[IN_CAP];
static size_t mark, pos, end;
static int in_eof;
static uint64_t bytes_in, bytes_out;

#define OUT_CAP (1u << 20)
static unsigned char out[OUT_CAP];
static size_t out_len;
static int out_fd = 1;

static const char *block;
static uint64_t ram_bytes;
static unsigned char *bitmap;
static size_t bitmap_len;
static uint64_t pages, kept;
static int passed;

static void die(const char *what) {
	fprintf(stderr, "den-pagefilter: %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
	exit(2);
}

static void write_fd(const unsigned char *p, size_t n) {
	while (n) {
		ssize_t w = write(out_fd, p, n);
		if (w < 0) {
			if (errno == EINTR) continue;
			die("write");
		}
		p += w;
		n -= (size_t)w;
	}
}

#ifdef DEN_ZSTD
static ZSTD_CCtx *zc;
static unsigned char zbuf[1u << 20];

/* Feeds `n` bytes to the compressor (ZSTD_e_end: and ends its frame), writing what it makes. */
static void compress_out(const unsigned char *p, size_t n, ZSTD_EndDirective mode) {
	ZSTD_inBuffer in_b = { p, n, 0 };
	for (;;) {
		ZSTD_outBuffer out_b = { zbuf, sizeof zbuf, 0 };
		size_t left = ZSTD_compressStream2(zc, &out_b, &in_b, mode);
		if (ZSTD_isError(left)) {
			errno = 0;
			fprintf(stderr, "den-pagefilter: zstd: %s\n", ZSTD_getErrorName(left));
			exit(2);
		}
		write_fd(zbuf, out_b.pos);
		if (mode == ZSTD_e_end ? left == 0 : in_b.pos == in_b.size) return;
	}
}
#endif

/* Every output byte goes through here: to the output (or the compressor's pipe), or compressed first. */
static void write_all(const unsigned char *p, size_t n) {
#ifdef DEN_ZSTD
	if (zc) {
		compress_out(p, n, ZSTD_e_continue);
		return;
	}
#endif
	write_fd(p, n);
}

static void flush_out(void) {
	write_all(out, out_len);
	bytes_out += out_len;
	out_len = 0;
}

static void emit(const unsigned char *p, size_t n) {
	if (out_len + n > OUT_CAP) flush_out();
	if (n > OUT_CAP) {
		write_all(p, n);
		bytes_out += n;
		return;
	}
	memcpy(out + out_len, p, n);
	out_len += n;
}

/* Makes `n` bytes available from `pos`; 0 at the stream's end. */
static int want(size_t n) {
	while (end - pos < n) {
		if (in_eof) return 0;
		if (end == IN_CAP) {
			if (mark == 0) die("a record longer than the input window");
			memmove(in, in + mark, end - mark);
			pos -= mark;
			end -= mark;
			mark = 0;
		}
		ssize_t r = read(0, in + end, IN_CAP - end);
		if (r < 0) {
			if (errno == EINTR) continue;
			die("read");
		}
		if (r == 0) in_eof = 1;
		end += (size_t)r;
		bytes_in += (uint64_t)r;
	}
	return 1;
}

/* Thrown (by longjmp-free return codes): the parse met something it does not know. */
#define UNKNOWN (-1)

static int u8(unsigned *v) {
	if (!want(1)) return UNKNOWN;
	*v = in[pos++];
	return 0;
}
static int be32(uint32_t *v) {
	if (!want(4)) return UNKNOWN;
	*v = (uint32_t)in[pos] << 24 | (uint32_t)in[pos + 1] << 16 | (uint32_t)in[pos + 2] << 8 | in[pos + 3];
	pos += 4;
	return 0;
}
static int be64(uint64_t *v) {
	uint32_t hi, lo;
	if (be32(&hi) || be32(&lo)) return UNKNOWN;
	*v = (uint64_t)hi << 32 | lo;
	return 0;
}
/* A length-prefixed string into `s` (256 bytes). */
static int str(char *s) {
	unsigned n;
	if (u8(&n) || !want(n)) return UNKNOWN;
	memcpy(s, in + pos, n);
	s[n] = 0;
	pos += n;
	return 0;
}
static int peek(unsigned *v) {
	if (!want(1)) return UNKNOWN;
	*v = in[pos];
	return 0;
}
static void take(void) {
	emit(in + mark, pos - mark);
	mark = pos;
}
static void drop(void) {
	mark = pos;
}

static char last_read[256], last_emitted[256];
static int have_read, have_emitted;

static int changed(uint64_t offset) {
	uint64_t p = offset / PAGE;
	if (offset % PAGE || p / 8 >= bitmap_len) return 1;
	return bitmap[p / 8] >> (p % 8) & 1;
}

/* RAM records up to and including EOS. */
static int ram_records(void) {
	for (;;) {
		uint64_t h;
		if (be64(&h)) return UNKNOWN;
		unsigned flags = (unsigned)(h & FLAG_MASK);
		uint64_t offset = h & ~(uint64_t)FLAG_MASK;
		if (flags & FLAG_UNEXPECTED) return UNKNOWN;
		if (flags & FLAG_EOS) {
			if (flags & ~FLAG_EOS) return UNKNOWN;
			take();
			return 0;
		}
		if (!(flags & (FLAG_PAGE | FLAG_ZERO))) return UNKNOWN;
		if (!(flags & FLAG_CONTINUE)) {
			if (str(last_read)) return UNKNOWN;
			have_read = 1;
		} else if (!have_read) return UNKNOWN;
		size_t body = pos;
		size_t body_len = flags & FLAG_PAGE ? PAGE : 1;
		if (!want(body_len)) return UNKNOWN;
		pos += body_len;
		int ours = strcmp(last_read, block) == 0;
		if (ours) pages++;
		if (ours && !changed(offset)) {
			drop();
			continue;
		}
		if (ours) kept++;
		if (!(flags & FLAG_CONTINUE) || (have_emitted && strcmp(last_read, last_emitted) == 0)) {
			/* Its header holds: it names its block, or continues the one the output named last. */
			take();
		} else {
			/* It continues a block whose naming record was dropped: it names the block itself. */
			unsigned char hdr[8 + 1 + 255];
			size_t n = strlen(last_read);
			uint64_t nh = h & ~(uint64_t)FLAG_CONTINUE;
			for (int i = 0; i < 8; i++) hdr[i] = (unsigned char)(nh >> (56 - 8 * i));
			hdr[8] = (unsigned char)n;
			memcpy(hdr + 9, last_read, n);
			emit(hdr, 9 + n);
			emit(in + body, body_len);
			mark = pos;
		}
		strcpy(last_emitted, last_read);
		have_emitted = 1;
	}
}

static int footer(uint32_t section) {
	unsigned t;
	uint32_t id;
	if (peek(&t)) return 0; /* the stream's end: the loader decides */
	if (t != SECTION_FOOTER) return 0;
	pos++;
	if (be32(&id) || id != section) return UNKNOWN;
	take();
	return 0;
}

static int parse(void) {
	uint32_t v;
	unsigned t;
	char name[256];
	int ignore_shared = 0;
	if (be32(&v) || v != FILE_MAGIC) return UNKNOWN;
	if (be32(&v) || v != 3) return UNKNOWN;
	if (peek(&t) == 0 && t == CONFIGURATION) {
		pos++;
		if (be32(&v) || !want(v)) return UNKNOWN;
		pos += v;
		while (peek(&t) == 0 && t == SUBSECTION) {
			pos++;
			if (str(name) || be32(&v)) return UNKNOWN;
			if (strcmp(name, "configuration/capabilities") == 0) {
				uint32_t n;
				char cap[256];
				if (be32(&n)) return UNKNOWN;
				for (; n > 0; n--) {
					if (str(cap)) return UNKNOWN;
					/* Capabilities that change how RAM is laid out in the stream, beyond this parser. */
					if (strcmp(cap, "x-ignore-shared") != 0) return UNKNOWN;
					ignore_shared = 1;
				}
			} else if (strcmp(name, "configuration/target-page-bits") == 0) {
				if (be32(&v) || v != 12) return UNKNOWN;
			} else return UNKNOWN;
		}
	}
	take();
	int have_ram = 0;
	uint32_t ram_section = 0;
	for (;;) {
		if (peek(&t)) return UNKNOWN;
		if (t == SECTION_START) {
			uint32_t id;
			uint64_t total, len, addr;
			pos++;
			if (be32(&id) || str(name) || be32(&v) || be32(&v)) return UNKNOWN;
			if (strcmp(name, "ram") != 0 || have_ram) return UNKNOWN;
			have_ram = 1;
			ram_section = id;
			if (be64(&total)) return UNKNOWN;
			if (!(total & FLAG_MEM_SIZE)) return UNKNOWN;
			uint64_t left = total & ~(uint64_t)FLAG_MASK;
			while (left > 0) {
				if (str(name) || be64(&len)) return UNKNOWN;
				if (ignore_shared && be64(&addr)) return UNKNOWN;
				if (strcmp(name, block) == 0 && len != ram_bytes) return UNKNOWN;
				if (len > left) return UNKNOWN;
				left -= len;
			}
			take();
			if (ram_records() || footer(id)) return UNKNOWN;
		} else if ((t == SECTION_PART || t == SECTION_END) && have_ram) {
			uint32_t id;
			pos++;
			if (be32(&id) || id != ram_section) return UNKNOWN;
			take();
			if (ram_records() || footer(ram_section)) return UNKNOWN;
		} else if (t == COMMAND && have_ram) {
			/* Only the one command known to carry nothing the RAM's layout depends on. */
			uint32_t cmd_len;
			pos++;
			if (be32(&cmd_len) || cmd_len != (uint32_t)CMD_SWITCHOVER_START << 16) return UNKNOWN;
			take();
		} else {
			/* Devices' full sections (and EOF) follow the last RAM: nothing more to filter. */
			return 0;
		}
	}
}

static pid_t compressor = -1;

/* Starts `cmd` with its stdin a pipe this program writes into, its stdout this program's. */
static void start_compressor(char **cmd) {
	int p[2];
	if (pipe(p) < 0) die("pipe");
	compressor = fork();
	if (compressor < 0) die("fork");
	if (compressor == 0) {
		dup2(p[0], 0);
		close(p[0]);
		close(p[1]);
		execvp(cmd[0], cmd);
		_exit(127);
	}
	close(p[0]);
	out_fd = p[1];
}

int main(int argc, char **argv) {
	int zstd_level = 0;
	if (argc == 5 && strcmp(argv[3], "--zstd") == 0) {
		zstd_level = atoi(argv[4]);
		if (zstd_level < 1 || zstd_level > 19) {
			fprintf(stderr, "den-pagefilter: bad zstd level\n");
			return 64;
		}
#ifndef DEN_ZSTD
		fprintf(stderr, "den-pagefilter: built without libzstd\n");
		return 64;
#endif
	} else if (argc < 3 || (argc > 3 && (strcmp(argv[3], "--") != 0 || argc < 5))) {
		fprintf(stderr, "usage: den-pagefilter BLOCK RAM_BYTES [--zstd LEVEL | -- COMPRESSOR ARGS...] <stream >filtered 3<bitmap\n");
		return 64;
	}
	block = argv[1];
	ram_bytes = strtoull(argv[2], NULL, 10);
	if (strlen(block) > 255 || ram_bytes == 0 || ram_bytes % PAGE) {
		fprintf(stderr, "den-pagefilter: bad arguments\n");
		return 64;
	}
	bitmap_len = (size_t)((ram_bytes / PAGE + 7) / 8);
	bitmap = malloc(bitmap_len);
	if (!bitmap) die("malloc");
	for (size_t got = 0; got < bitmap_len;) {
		ssize_t r = read(3, bitmap + got, bitmap_len - got);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) die("the bitmap on descriptor 3 is short");
		got += (size_t)r;
	}
	close(3);
#ifdef DEN_ZSTD
	if (zstd_level) {
		zc = ZSTD_createCCtx();
		if (!zc || ZSTD_isError(ZSTD_CCtx_setParameter(zc, ZSTD_c_compressionLevel, zstd_level)) ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(zc, ZSTD_c_checksumFlag, 1))) {
			fprintf(stderr, "den-pagefilter: zstd: cannot set up level %d\n", zstd_level);
			return 64;
		}
	}
#endif
	if (argc > 3 && !zstd_level) start_compressor(argv + 4);
	if (parse() == UNKNOWN) {
		/* Once a page is gone, a CONTINUE record passed on as it is may name the wrong block. */
		if (pages > kept) {
			errno = 0;
			die("the migration stream cannot be filtered past this point");
		}
		passed = 1;
	}
	/* The rest as it is: what was consumed but not yet sent, then everything after it. */
	emit(in + mark, end - mark);
	mark = pos = end;
	flush_out();
	for (;;) {
		ssize_t r = read(0, in, IN_CAP);
		if (r < 0 && errno == EINTR) continue;
		if (r < 0) die("read");
		if (r == 0) break;
		bytes_in += (uint64_t)r;
		write_all(in, (size_t)r);
		bytes_out += (uint64_t)r;
	}
	double cpu = 0;
#ifdef DEN_ZSTD
	if (zc) compress_out(NULL, 0, ZSTD_e_end);
#endif
	if (compressor > 0) {
		/* Its end of input: it finishes, and its exit is this one's. */
		close(out_fd);
		int status;
		struct rusage cru;
		if (wait4(compressor, &status, 0, &cru) < 0) die("wait");
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			errno = 0;
			die("the compressor failed");
		}
		cpu += (double)(cru.ru_utime.tv_sec + cru.ru_stime.tv_sec) + (double)(cru.ru_utime.tv_usec + cru.ru_stime.tv_usec) / 1e6;
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	cpu += (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	fprintf(stderr, "pages %llu kept %llu passed %d in %llu out %llu cpu %.6f\n", (unsigned long long)pages, (unsigned long long)kept, passed,
		(unsigned long long)bytes_in, (unsigned long long)bytes_out, cpu);
	return 0;
}
