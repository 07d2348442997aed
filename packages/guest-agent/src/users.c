/* Guest users by name, read from /etc/passwd and /etc/group directly: no NSS (the agent is
 * static, and must not load the guest's libraries), every line and count bounded. */
#define _GNU_SOURCE
#include "agent.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096
#define MAX_LINES 100000 /* a hostile 1 GB /etc/passwd must not stall the agent for long */

/* Portable user names (useradd's, plus upper case and a trailing $ for machine accounts). */
static int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > USER_NAME_MAX || s[0] == '-')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		         c == '-' || c == '.' || (c == '$' && i == n - 1);
		if (!ok)
			return 0;
	}
	return 1;
}

/* Splits a colon-separated line into at most max fields in place. Returns the count. */
static int fields(char *line, char **f, int max)
{
	int n = 0;
	line[strcspn(line, "\n")] = 0;
	for (char *p = line; n < max;) {
		f[n++] = p;
		p = strchr(p, ':');
		if (!p)
			break;
		*p++ = 0;
	}
	return n;
}

static int parse_id(const char *s, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *end || errno || v >= 0xffffffffUL)
		return -1;
	*out = v;
	return 0;
}

/* Calls fn on each line of path (bounded); long lines are skipped whole. fn returns 1 to stop. */
static int each_line(const char *path, int (*fn)(char *line, void *ctx), void *ctx)
{
	char line[LINE_MAX_BYTES];
	int skipping = 0;
	struct stat st;
	/* A regular file only: a fifo or a device put there must not block the agent. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	for (int i = 0; i < MAX_LINES && fgets(line, sizeof line, f); i++) {
		int whole = strchr(line, '\n') != NULL || feof(f);
		if (skipping || !whole) {
			skipping = !whole;
			continue;
		}
		if (fn(line, ctx))
			break;
	}
	fclose(f);
	return 0;
}

static int passwd_line(char *line, void *ctx)
{
	struct guser *u = ctx;
	char *f[7];
	unsigned uid, gid;
	if (fields(line, f, 7) < 7 || strcmp(f[0], u->name))
		return 0;
	if (parse_id(f[2], &uid) || parse_id(f[3], &gid) || strlen(f[5]) >= sizeof u->home)
		return 0; /* a malformed entry is no user */
	u->uid = uid;
	u->gid = gid;
	strcpy(u->home, f[5][0] == '/' ? f[5] : "/");
	u->found = 1;
	return 1;
}

/* Supplementary groups: every group listing the user as a member (as initgroups does). */
static int group_line(char *line, void *ctx)
{
	struct guser *u = ctx;
	char *f[4], *save = NULL;
	unsigned gid;
	if (fields(line, f, 4) < 4 || parse_id(f[2], &gid) || gid == u->gid)
		return 0;
	for (char *m = strtok_r(f[3], ",", &save); m; m = strtok_r(NULL, ",", &save))
		if (!strcmp(m, u->name)) {
			u->groups[u->ngroups++] = gid;
			break;
		}
	return u->ngroups == USER_GROUPS_MAX;
}

int user_lookup(struct req *r, const char *name, struct guser *u)
{
	memset(u, 0, sizeof *u);
	if (!valid_name(name))
		return req_err(r, "invalid_argument", "bad user name \"%.40s\"", name);
	strcpy(u->name, name);
	int e = each_line("/etc/passwd", passwd_line, u);
	if (e)
		return req_errno(r, -e, "/etc/passwd");
	if (!u->found)
		return req_err(r, "invalid_argument", "no user \"%s\" in the guest's /etc/passwd", name);
	u->groups[u->ngroups++] = u->gid;
	each_line("/etc/group", group_line, u); /* no /etc/group: the primary group only */
	return 0;
}

int arg_user(struct req *r, struct guser *u)
{
	const char *name;
	int rc = arg_str(r, "user", &name, 0);
	if (rc <= 0)
		return rc;
	return user_lookup(r, name, u) ? -1 : 1;
}
