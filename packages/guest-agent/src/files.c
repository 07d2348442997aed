/* File requests: streamed read/write under credit, stat/list/mkdir/remove/rename. */
#define _GNU_SOURCE
#include "agent.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_WINDOW_DEFAULT 262144
#define WRITE_WINDOW (1u << 20)
#define LIST_MAX 10000

struct xfer {
	struct xfer *next;
	uint32_t id;
	int write, fd, regular, dead;
	int64_t left; /* read: bytes still to send, -1 = to EOF */
	uint64_t credit, bytes;
	char *tmp, *target;
};
static struct xfer *xfers;

static void event_error(uint32_t id, const char *code, const char *msg)
{
	struct buf b = {0};
	struct jw w;
	jw_init(&w, &b);
	jw_obj(&w);
	jw_kstr(&w, "event", "error");
	jw_kstr(&w, "code", code);
	jw_kstr(&w, "message", msg);
	jw_end_obj(&w);
	out_json(F_EVENT, id, &b);
	buf_free(&b);
}

/* Marks it finished; it is unlinked and freed from files_tick (never mid-dispatch). */
static void xfer_end(struct xfer *x, int unlink_tmp)
{
	if (x->dead)
		return;
	if (x->fd >= 0)
		close(x->fd);
	x->fd = -1;
	if (unlink_tmp && x->tmp)
		unlink(x->tmp);
	x->dead = 1;
}

void files_abort_all(void)
{
	for (struct xfer *x = xfers; x; x = x->next)
		xfer_end(x, 1);
}

static struct xfer *find(uint32_t id, int write)
{
	for (struct xfer *x = xfers; x; x = x->next)
		if (!x->dead && x->id == id && x->write == write)
			return x;
	return NULL;
}

static void read_chunk(struct xfer *x)
{
	size_t want = DATA_MAX;
	if (x->credit < want)
		want = x->credit;
	if (x->left >= 0 && (uint64_t)x->left < want)
		want = x->left;
	if (x->left == 0) {
		out_eof(x->id, CH_FILE);
		xfer_end(x, 0);
		return;
	}
	if (!want || !out_room())
		return;
	ssize_t r = out_data_from_fd(x->id, CH_FILE, x->fd, want);
	if (r > 0) {
		x->credit -= r;
		if (x->left > 0)
			x->left -= r;
		if (x->left == 0) {
			out_eof(x->id, CH_FILE);
			xfer_end(x, 0);
		}
	} else if (r == 0) {
		out_eof(x->id, CH_FILE);
		xfer_end(x, 0);
	} else if (errno != EAGAIN && errno != EINTR) {
		/* It opened, but its bytes cannot be read (EIO from /proc/self/mem, say): the file's
		 * doing, not the agent's. */
		event_error(x->id, "unreadable", strerror(errno));
		xfer_end(x, 0);
	}
}

void files_tick(void)
{
	for (struct xfer **xx = &xfers; *xx;) {
		struct xfer *x = *xx;
		if (x->dead) {
			*xx = x->next;
			free(x->tmp);
			free(x->target);
			free(x);
			continue;
		}
		/* Regular files are always readable: pump them here, one chunk per loop. */
		if (!x->write && x->regular)
			read_chunk(x);
		xx = &x->next;
	}
}

void files_prepare(void)
{
	for (struct xfer *x = xfers; x; x = x->next) {
		if (x->dead || x->write)
			continue;
		if (x->left != 0 && (!x->credit || !out_room()))
			continue; /* wait for CREDIT / queue space */
		if (x->regular || x->left == 0)
			timer_at(0);
		else
			watch(x->fd, POLLIN, W_FREAD, x, 0);
	}
}

void files_event(void *ptr, short rev)
{
	(void)rev;
	struct xfer *x = ptr;
	if (!x->dead)
		read_chunk(x);
}

void file_on_credit(uint32_t id, uint32_t n)
{
	struct xfer *x = find(id, 0);
	if (x)
		x->credit += n;
}

void file_on_data(uint32_t id, const char *p, size_t n)
{
	struct xfer *x = find(id, 1);
	if (!x)
		return;
	int e = write_all(x->fd, p, n);
	if (e) {
		event_error(id, errno_code(-e), strerror(-e));
		xfer_end(x, 1);
		return;
	}
	x->bytes += n;
	out_credit(id, CH_FILE, n); /* on disk now: the host may send more */
}

void file_on_eof(uint32_t id)
{
	struct xfer *x = find(id, 1);
	if (!x)
		return;
	int fd = x->fd;
	x->fd = -1;
	if (close(fd) || rename(x->tmp, x->target)) {
		event_error(id, errno_code(errno), strerror(errno));
		xfer_end(x, 1);
		return;
	}
	struct buf b = {0};
	buf_printf(&b, "{\"event\":\"done\",\"bytes\":%llu}", (unsigned long long)x->bytes);
	out_json(F_EVENT, id, &b);
	buf_free(&b);
	xfer_end(x, 0);
}

/* A directory just made for `u` becomes its (lchown: never through a symlink swapped in). */
static int own(const char *path, const struct guser *u)
{
	return u && lchown(path, u->uid, u->gid) ? -errno : 0;
}

/* Creates path and its missing parents (those it makes owned by u, if given). 0 or -errno. */
int mkdir_p(const char *path, mode_t mode, const struct guser *u)
{
	char *p = xstrdup(path);
	int e = 0;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;
		*s = 0;
		if (!mkdir(p, mode))
			e = own(p, u);
		else if (errno != EEXIST)
			e = -errno;
		*s = c;
		if (e || !c)
			break;
	}
	struct stat st;
	if (!e && (stat(p, &st) || !S_ISDIR(st.st_mode)))
		e = -EEXIST; /* a non-directory is in the way */
	free(p);
	return e;
}

/* A fresh temp name for `name` in `dir` (beside its target, so renaming it there is atomic),
 * under NAME_MAX even for long target names. */
static void tmp_name(struct buf *t, const char *dir, const char *name)
{
	unsigned char rnd[8];
	if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != sizeof rnd) {
		uint64_t v = mono_ms() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)t;
		memcpy(rnd, &v, sizeof rnd);
	}
	buf_printf(t, "%s/.%.200s.den-tmp-", strcmp(dir, "/") ? dir : "", name);
	for (size_t i = 0; i < sizeof rnd; i++)
		buf_printf(t, "%02x", rnd[i]);
	buf_addc(t, 0);
}

int op_file_read(struct req *r)
{
	const char *path;
	int64_t off = 0, len = -1, win = READ_WINDOW_DEFAULT;
	struct stat st;
	if (arg_path(r, "path", &path) < 0 || arg_int(r, "offset", &off, 0) < 0 ||
	    arg_int(r, "length", &len, 0) < 0 || arg_int(r, "window", &win, 0) < 0)
		return -1;
	if (off < 0 || win < 0)
		return req_err(r, "invalid_argument", "bad offset or window");
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return req_errno(r, errno, path);
	if (fstat(fd, &st)) {
		close(fd);
		return req_errno(r, errno, path);
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return req_errno(r, EISDIR, path);
	}
	if (off && lseek(fd, off, SEEK_SET) < 0) {
		close(fd);
		return req_errno(r, errno, path);
	}
	struct xfer *x = xcalloc(1, sizeof *x);
	x->id = r->id;
	x->fd = fd;
	x->regular = S_ISREG(st.st_mode);
	x->left = len < 0 ? -1 : len;
	x->credit = win; /* absent: the default; an explicit 0 waits for CREDIT */
	x->next = xfers;
	xfers = x;
	jw_kint(r->w, "size", st.st_size);
	jw_kint(r->w, "mode", st.st_mode & 07777);
	return 0;
}

int op_file_write(struct req *r)
{
	const char *path;
	int64_t mode = 0644;
	int parents = 0, has_user;
	struct stat st;
	struct guser u;
	if (arg_path(r, "path", &path) < 0 || arg_int(r, "mode", &mode, 0) < 0 || arg_bool(r, "parents", &parents) < 0 ||
	    (has_user = arg_user(r, &u)) < 0)
		return -1;
	const char *slash = strrchr(path, '/'), *name = slash + 1;
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return req_err(r, "invalid_argument", "bad file name: %s", path);
	char *dir = slash == path ? xstrdup("/") : strndup(path, slash - path);
	if (parents)
		mkdir_p(dir, 0755, has_user ? &u : NULL); /* on failure, open() below reports why */
	if (!stat(path, &st) && S_ISDIR(st.st_mode)) {
		free(dir);
		return req_errno(r, EISDIR, path);
	}
	struct buf t = {0};
	tmp_name(&t, dir, name);
	free(dir);
	int fd = open(buf_data(&t), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0) {
		int e = errno;
		buf_free(&t);
		return req_errno(r, e, path);
	}
	/* The owner before the mode: chown clears set-id bits. */
	if (has_user && fchown(fd, u.uid, u.gid)) {
		int e = errno;
		close(fd);
		unlink(buf_data(&t));
		buf_free(&t);
		return req_errno(r, e, path);
	}
	fchmod(fd, mode & 07777);
	struct xfer *x = xcalloc(1, sizeof *x);
	x->id = r->id;
	x->write = 1;
	x->fd = fd;
	x->tmp = xstrdup(buf_data(&t));
	x->target = xstrdup(path);
	buf_free(&t);
	x->next = xfers;
	xfers = x;
	jw_kint(r->w, "window", WRITE_WINDOW);
	return 0;
}

static const char *type_of(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

static int64_t mtime_ms(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

int op_file_stat(struct req *r)
{
	const char *path;
	struct stat st;
	if (arg_path(r, "path", &path) < 0)
		return -1;
	if (lstat(path, &st))
		return req_errno(r, errno, path);
	jw_kstr(r->w, "type", type_of(st.st_mode));
	jw_kint(r->w, "size", st.st_size);
	jw_kint(r->w, "mode", st.st_mode & 07777);
	jw_kint(r->w, "mtime_ms", mtime_ms(&st));
	jw_kint(r->w, "uid", st.st_uid);
	jw_kint(r->w, "gid", st.st_gid);
	if (S_ISLNK(st.st_mode)) {
		char t[4096];
		ssize_t n = readlink(path, t, sizeof t);
		if (n >= 0) {
			jw_key(r->w, "target");
			jw_strn(r->w, t, n);
		}
	}
	return 0;
}

int op_file_list(struct req *r)
{
	const char *path;
	struct dirent *e;
	int n = 0, truncated = 0;
	if (arg_path(r, "path", &path) < 0)
		return -1;
	DIR *d = opendir(path);
	if (!d)
		return req_errno(r, errno, path);
	jw_key(r->w, "entries");
	jw_arr(r->w);
	while ((e = readdir(d))) {
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		/* Stay well below MAX_PAYLOAD: one entry is at most a few KiB. */
		if (n >= LIST_MAX || r->w->b->len > MAX_PAYLOAD - 16384) {
			truncated = 1;
			break;
		}
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue; /* vanished meanwhile */
		jw_obj(r->w);
		jw_kstr(r->w, "name", e->d_name);
		jw_kstr(r->w, "type", type_of(st.st_mode));
		jw_kint(r->w, "size", st.st_size);
		jw_kint(r->w, "mode", st.st_mode & 07777);
		jw_kint(r->w, "mtime_ms", mtime_ms(&st));
		jw_end_obj(r->w);
		n++;
	}
	closedir(d);
	jw_end_arr(r->w);
	jw_kbool(r->w, "truncated", truncated);
	return 0;
}

int op_file_mkdir(struct req *r)
{
	const char *path;
	int64_t mode = 0755;
	int parents = 0, has_user, e;
	struct guser u;
	if (arg_path(r, "path", &path) < 0 || arg_int(r, "mode", &mode, 0) < 0 || arg_bool(r, "parents", &parents) < 0 ||
	    (has_user = arg_user(r, &u)) < 0)
		return -1;
	if (parents) {
		e = mkdir_p(path, mode & 07777, has_user ? &u : NULL);
		if (e)
			return req_errno(r, -e, path);
		return 0;
	}
	if (mkdir(path, mode & 07777))
		return req_errno(r, errno, path);
	if ((e = own(path, has_user ? &u : NULL)))
		return req_errno(r, -e, path);
	chmod(path, mode & 07777); /* not subject to the umask */
	return 0;
}

/* Removes dir `name` under dirfd recursively, never following symlinks. 0 or errno. */
static int rm_tree(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return e;
	}
	struct dirent *e;
	int err = 0;
	while ((e = readdir(d))) {
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		int rc = S_ISDIR(st.st_mode) ? rm_tree(fd, e->d_name) : unlinkat(fd, e->d_name, 0) ? errno : 0;
		if (rc && !err)
			err = rc;
	}
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) && !err)
		err = errno;
	return err;
}

int op_file_remove(struct req *r)
{
	const char *path;
	int rec = 0;
	struct stat st;
	if (arg_path(r, "path", &path) < 0 || arg_bool(r, "recursive", &rec) < 0)
		return -1;
	if (!strcmp(path, "/"))
		return req_err(r, "invalid_argument", "refusing to remove /");
	if (lstat(path, &st))
		return req_errno(r, errno, path);
	int e = 0;
	if (!S_ISDIR(st.st_mode))
		e = unlink(path) ? errno : 0;
	else if (rec)
		e = rm_tree(AT_FDCWD, path);
	else
		e = rmdir(path) ? errno : 0;
	if (e == EEXIST)
		e = ENOTEMPTY;
	return e ? req_errno(r, e, path) : 0;
}

static int copy_node(int sdir, const char *sname, int ddir, const char *dname, dev_t dev);

/* Copies a regular file's bytes into a new file. 0 or errno. */
static int copy_file(int sdir, const char *sname, int ddir, const char *dname)
{
	int in = openat(sdir, sname, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (in < 0)
		return errno;
	int out = openat(ddir, dname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int e = out < 0 ? errno : 0;
	while (!e) {
		ssize_t n = sendfile(out, in, NULL, 1 << 30);
		if (!n)
			break;
		if (n < 0 && errno != EINTR)
			e = errno;
	}
	if (out >= 0 && close(out) && !e)
		e = errno;
	close(in);
	return e;
}

/* Copies the entries of directory sname into the (new, empty) directory dname. 0 or errno. */
static int copy_dir(int sdir, const char *sname, int ddir, const char *dname, dev_t dev)
{
	int sfd = openat(sdir, sname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0)
		return errno;
	int dfd = openat(ddir, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dfd < 0 ? NULL : fdopendir(sfd);
	if (!d) {
		int e = errno;
		close(sfd);
		if (dfd >= 0)
			close(dfd);
		return e;
	}
	struct dirent *de;
	int e = 0;
	while (!e && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			e = copy_node(sfd, de->d_name, dfd, de->d_name, dev);
	closedir(d);
	close(dfd);
	return e;
}

/* Copies sname (under sdir) to the new dname (under ddir) with its mode, owner and times, as
 * mv does across filesystems: directories recursively, symlinks as links, devices and fifos
 * as nodes. A directory on another filesystem than `dev` (a mount point inside the tree,
 * maybe the target's own) is EXDEV, so a tree is never copied into itself. 0 or errno. */
static int copy_node(int sdir, const char *sname, int ddir, const char *dname, dev_t dev)
{
	struct stat st;
	int e = 0;
	if (fstatat(sdir, sname, &st, AT_SYMLINK_NOFOLLOW))
		return errno;
	if (S_ISLNK(st.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(sdir, sname, t, sizeof t - 1);
		if (n < 0)
			return errno;
		t[n] = 0;
		e = symlinkat(t, ddir, dname) ? errno : 0;
	} else if (S_ISREG(st.st_mode)) {
		e = copy_file(sdir, sname, ddir, dname);
	} else if (S_ISDIR(st.st_mode)) {
		if (st.st_dev != dev)
			return EXDEV;
		/* Owner-writable until its entries are in; its own mode comes after. */
		e = mkdirat(ddir, dname, 0700) ? errno : copy_dir(sdir, sname, ddir, dname, dev);
	} else {
		e = mknodat(ddir, dname, (st.st_mode & S_IFMT) | 0600, st.st_rdev) ? errno : 0;
	}
	if (e)
		return e;
	/* The owner first: chown clears set-id bits, the mode after it puts them back. As with
	 * mv, a filesystem that cannot keep an owner does not fail the move. */
	int ignored = fchownat(ddir, dname, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
	(void)ignored;
	if (!S_ISLNK(st.st_mode) && fchmodat(ddir, dname, st.st_mode & 07777, 0))
		return errno;
	struct timespec times[2] = {st.st_atim, st.st_mtim};
	ignored = utimensat(ddir, dname, times, AT_SYMLINK_NOFOLLOW);
	return 0;
}

/* rename(2) where it cannot (EXDEV: in Den's guests /tmp, /run and /dev/shm are tmpfs, the
 * rest is the disk), done as mv does it: a copy under a temp name beside `to`, renamed over
 * `to` (so rename's rules on what may be replaced still hold, and atomically), then `from`
 * removed. The copy runs inside the request like every op here; what it copies is bounded
 * by the tmpfs at one end. 0 or errno. */
static int move_across(const char *from, const char *to)
{
	struct stat st;
	if (lstat(from, &st))
		return errno;
	const char *slash = strrchr(to, '/'), *name = slash + 1;
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return EINVAL;
	char *dir = slash == to ? xstrdup("/") : strndup(to, slash - to);
	struct buf t = {0};
	tmp_name(&t, dir, name);
	free(dir);
	const char *tmp = buf_data(&t);
	int e = copy_node(AT_FDCWD, from, AT_FDCWD, tmp, st.st_dev);
	if (!e && rename(tmp, to))
		e = errno;
	if (e) {
		/* Whatever part of the copy exists goes; `from` and `to` stay as they were. */
		if (unlink(tmp) && errno == EISDIR)
			rm_tree(AT_FDCWD, tmp);
	} else {
		/* Should this fail, the copy is in place already: the error says what is left. */
		e = S_ISDIR(st.st_mode) ? rm_tree(AT_FDCWD, from) : unlink(from) ? errno : 0;
	}
	buf_free(&t);
	return e;
}

int op_file_rename(struct req *r)
{
	const char *from, *to;
	if (arg_path(r, "from", &from) < 0 || arg_path(r, "to", &to) < 0)
		return -1;
	if (!rename(from, to))
		return 0;
	int e = errno == EXDEV ? move_across(from, to) : errno;
	if (e == EXDEV)
		return req_err(r, "invalid_argument", "%s: holds a mount point, so it cannot move to another filesystem", from);
	return e ? req_errno(r, e, from) : 0;
}

/* The host gave up on a transfer (its source failed, or its reader went away): a write's
 * temp file is removed and the target is left as it was; a tunnel is reset. Unknown ids
 * are fine (it ended). */
int op_stream_cancel(struct req *r)
{
	int64_t id;
	if (arg_int(r, "stream", &id, 1) < 0)
		return -1;
	for (struct xfer *x = xfers; x; x = x->next)
		if (!x->dead && x->id == (uint32_t)id)
			xfer_end(x, 1);
	tunnel_cancel(id);
	return 0;
}
