/* file.setxattr / file.getxattrs: `user.*` extended attributes only, every size bounded. */
#define _GNU_SOURCE
#include "agent.h"
#include <errno.h>
#include <string.h>
#include <sys/xattr.h>

#define XATTRS_MAX 128                  /* attributes per call, either way */
#define XATTR_NAME_BYTES 255            /* the kernel's XATTR_NAME_MAX */
#define XATTR_VALUE_BYTES 65536         /* the kernel's XATTR_SIZE_MAX */
#define XATTRS_SET_BYTES (256u << 10)   /* names + values of one set */
#define XATTR_LIST_BYTES 65536          /* the kernel's XATTR_LIST_MAX */

static int user_name(const char *k)
{
	size_t n = strlen(k);
	return n > 5 && n <= XATTR_NAME_BYTES && !strncmp(k, "user.", 5);
}

/* Errors of the attribute calls, in the file codes' terms. */
static int xattr_errno(struct req *r, int e, const char *path)
{
	if (e == ENOTSUP)
		return req_err(r, "invalid_argument", "%s: its filesystem keeps no user.* attributes", path);
	if (e == ENOSPC || e == E2BIG || e == ERANGE)
		return req_err(r, "invalid_argument", "%s: the attributes do not fit its filesystem (%s)", path, strerror(e));
	return req_errno(r, e, path);
}

int op_file_setxattr(struct req *r)
{
	const char *path;
	const struct jv *a = jget(r->a, "attrs");
	size_t total = 0;
	if (arg_path(r, "path", &path) < 0)
		return -1;
	if (!a || a->t != J_OBJ)
		return req_err(r, "invalid_argument", "\"attrs\" must be an object of strings");
	if (a->n > XATTRS_MAX)
		return req_err(r, "invalid_argument", "at most %d attributes per call", XATTRS_MAX);
	/* All checked before any is set, so a bad request changes nothing. */
	for (size_t i = 0; i < a->n; i++) {
		const char *k = a->keys[i];
		const struct jv *v = a->items[i];
		if (!user_name(k))
			return req_err(r, "invalid_argument", "attribute names are user.<name> (at most %d bytes): \"%.64s\"", XATTR_NAME_BYTES, k);
		if (v->t != J_STR || v->n > XATTR_VALUE_BYTES)
			return req_err(r, "invalid_argument", "attribute %.64s: the value must be a string of at most %d bytes", k, XATTR_VALUE_BYTES);
		total += strlen(k) + v->n;
	}
	if (total > XATTRS_SET_BYTES)
		return req_err(r, "invalid_argument", "attributes of more than %u bytes in one call", XATTRS_SET_BYTES);
	for (size_t i = 0; i < a->n; i++)
		if (setxattr(path, a->keys[i], a->items[i]->s, a->items[i]->n, 0))
			return xattr_errno(r, errno, path);
	return 0;
}

int op_file_getxattrs(struct req *r)
{
	const char *path;
	static char names[XATTR_LIST_BYTES], value[XATTR_VALUE_BYTES];
	int n = 0, truncated = 0;
	if (arg_path(r, "path", &path) < 0)
		return -1;
	/* Fixed buffers at the kernel's maxima: no size query, so no race with a growing list. */
	ssize_t len = listxattr(path, names, sizeof names);
	if (len < 0 && errno != ENOTSUP)
		return xattr_errno(r, errno, path); /* (a filesystem without attributes has none) */
	jw_key(r->w, "attrs");
	jw_obj(r->w);
	for (ssize_t off = 0; off < len; off += strlen(names + off) + 1) {
		const char *k = names + off;
		if (!user_name(k))
			continue;
		ssize_t vl = getxattr(path, k, value, sizeof value);
		if (vl < 0)
			continue; /* removed meanwhile */
		/* Escaping grows a byte to at most 6: stay under MAX_PAYLOAD whatever the bytes. */
		if (n >= XATTRS_MAX || r->w->b->len + 6 * (strlen(k) + (size_t)vl) + 64 > MAX_PAYLOAD - 4096) {
			truncated = 1;
			break;
		}
		jw_key(r->w, k);
		jw_strn(r->w, value, vl);
		n++;
	}
	jw_end_obj(r->w);
	jw_kbool(r->w, "truncated", truncated);
	return 0;
}
