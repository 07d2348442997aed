/* vol.* requests: Den volumes. The host wires each VM with fixed virtio-blk slots (no
 * hotplug on microvm), the disk with serial "den-vol-<slot>"; a slot holds a volume's
 * ext4 image or nothing. The guest may have probed (and cached) a slot when it held
 * other media, so every mount first drops the device's cached blocks. */
#define _GNU_SOURCE
#include "agent.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOL_SLOTS_MAX 16

/* The block device of a slot, found by its serial (probe order is not slot order). */
static int slot_device(int64_t slot, char *dev, size_t cap)
{
	char want[32], path[300], serial[64];
	snprintf(want, sizeof want, "den-vol-%lld", (long long)slot);
	DIR *d = opendir("/sys/block");
	if (!d)
		return -errno;
	struct dirent *e;
	int found = -ENODEV;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "vd", 2) || strlen(e->d_name) > 32)
			continue;
		snprintf(path, sizeof path, "/sys/block/%s/serial", e->d_name);
		ssize_t n = read_small(path, serial, sizeof serial);
		while (n > 0 && (serial[n - 1] == '\n' || serial[n - 1] == ' '))
			serial[--n] = 0;
		if (n > 0 && !strcmp(serial, want)) {
			snprintf(dev, cap, "/dev/%s", e->d_name);
			found = 0;
			break;
		}
	}
	closedir(d);
	return found;
}

/* Whether `path` is where a Den volume slot is mounted: release and detach never unmount
 * anything else (mountinfo escapes whitespace, which volume paths never have). */
static int is_volume_mount(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[1024], mp[512], src[256], serial[64], sys[300];
	int found = 0;
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof line, f)) {
		const char *sep = strstr(line, " - ");
		if (!sep || sscanf(line, "%*s %*s %*s %*s %511s", mp) != 1 || strcmp(mp, path))
			continue;
		if (sscanf(sep + 3, "%*s %255s", src) != 1 || strncmp(src, "/dev/vd", 7) || strchr(src + 5, '/'))
			continue;
		snprintf(sys, sizeof sys, "/sys/block/%s/serial", src + 5);
		found = read_small(sys, serial, sizeof serial) > 0 && !strncmp(serial, "den-vol-", 8);
	}
	fclose(f);
	return found;
}

/* A mount point the host asked for: not the root, nothing the system needs, no "..". */
static int volume_path_ok(const char *p)
{
	for (const char *c = p; *c; c++)
		if (*c <= ' ' || *c == '\\' || *c == 127)
			return 0;
	static const char *const system[] = {"/proc", "/sys", "/dev", "/run", "/etc", "/bin", "/sbin", "/lib", "/usr", "/boot"};
	if (p[0] != '/' || !p[1] || strstr(p, "/../") || strstr(p, "/./") || strlen(p) >= 256)
		return 0;
	size_t l = strlen(p);
	if ((l >= 3 && !strcmp(p + l - 3, "/..")) || (l >= 2 && !strcmp(p + l - 2, "/.")) || p[l - 1] == '/')
		return 0;
	for (size_t i = 0; i < sizeof system / sizeof system[0]; i++) {
		size_t s = strlen(system[i]);
		if (!strncmp(p, system[i], s) && (p[s] == 0 || p[s] == '/'))
			return 0;
	}
	return 1;
}

/* {slot, path, read_only}: mounts the slot's ext4 at path (made if missing). */
int op_vol_mount(struct req *r)
{
	int64_t slot;
	const char *path;
	int ro = 0;
	char dev[300];
	if (arg_int(r, "slot", &slot, 1) < 0 || arg_path(r, "path", &path) < 0 || arg_bool(r, "read_only", &ro) < 0)
		return -1;
	if (slot < 0 || slot >= VOL_SLOTS_MAX)
		return req_err(r, "invalid_argument", "bad slot");
	if (!volume_path_ok(path))
		return req_err(r, "invalid_argument", "a volume cannot be mounted at %s", path);
	int e = slot_device(slot, dev, sizeof dev);
	if (e)
		return req_errno(r, -e, "volume slot");
	/* Blocks cached from the media this slot held before (the template's empty slot, or
	 * an earlier volume) must not be read as this volume's. */
	int fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return req_errno(r, errno, dev);
	e = ioctl(fd, BLKFLSBUF, 0) ? errno : 0;
	close(fd);
	if (e)
		return req_errno(r, e, "BLKFLSBUF");
	e = mkdir_p(path, 0755, NULL);
	if (e)
		return req_errno(r, -e, path);
	/* noinit_itable: the image's unwritten inode tables read as zeros already; zeroing
	 * them in the background would only grow the image. */
	unsigned long fl = MS_NODEV | MS_NOSUID | (ro ? MS_RDONLY : 0);
	if (!mount(dev, path, "ext4", fl, ro ? NULL : "noinit_itable"))
		return 0;
	/* A read-only disk (the host holds it so) whose journal needs replaying cannot replay
	 * it: a reader sees the filesystem as its last clean commit left it. */
	if (ro && !mount(dev, path, "ext4", fl, "noload"))
		return 0;
	return req_errno(r, errno, "mount");
}

/* {path}: flushes and unmounts a volume so its image can be read by others. A volume
 * some process still holds stays mounted: {"released": false}. */
int op_vol_release(struct req *r)
{
	const char *path;
	if (arg_path(r, "path", &path) < 0)
		return -1;
	sync();
	if (!is_volume_mount(path)) {
		jw_kbool(r->w, "released", 1); /* not a volume's mount: nothing of it to let go of */
		return 0;
	}
	if (umount2(path, 0)) {
		if (errno == EINVAL || errno == ENOENT) {
			jw_kbool(r->w, "released", 1); /* not mounted: nothing holds it */
			return 0;
		}
		if (errno != EBUSY)
			return req_errno(r, errno, "umount");
		jw_kbool(r->w, "released", 0);
		return 0;
	}
	jw_kbool(r->w, "released", 1);
	return 0;
}

/* {slot, path}: a mount whose media is gone (a restored checkpoint's, a fork's) leaves the
 * tree at once; files still open on it read what the guest had cached. "free": nothing
 * holds the slot's device any more (the host may put a volume there again). */
int op_vol_detach(struct req *r)
{
	const char *path;
	int64_t slot;
	char dev[300];
	if (arg_int(r, "slot", &slot, 1) < 0 || arg_path(r, "path", &path) < 0)
		return -1;
	if (slot < 0 || slot >= VOL_SLOTS_MAX)
		return req_err(r, "invalid_argument", "bad slot");
	if (is_volume_mount(path) && umount2(path, MNT_DETACH) && errno != EINVAL && errno != ENOENT)
		return req_errno(r, errno, "umount");
	int free_ = 0;
	if (!slot_device(slot, dev, sizeof dev)) {
		/* The superblock goes a moment after the last reference: O_EXCL fails while it is there. */
		for (int i = 0; i < 20 && !free_; i++) {
			int fd = open(dev, O_RDONLY | O_EXCL | O_CLOEXEC);
			if (fd >= 0) {
				close(fd);
				free_ = 1;
			} else {
				usleep(5000);
			}
		}
	}
	jw_kbool(r->w, "free", free_);
	return 0;
}

/* {path, bytes}: grows a mounted read-write volume's filesystem to its new size. */
int op_vol_grow(struct req *r)
{
	const char *path;
	int64_t bytes;
	if (arg_path(r, "path", &path) < 0 || arg_int(r, "bytes", &bytes, 1) < 0)
		return -1;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return req_errno(r, errno, path);
	struct stat st;
	if (fstat(fd, &st)) {
		close(fd);
		return req_errno(r, errno, path);
	}
	/* ext4 counts in filesystem blocks. */
	unsigned long long blocks = (unsigned long long)bytes / (unsigned long long)st.st_blksize;
	int e = ioctl(fd, _IOW('f', 16, unsigned long long), &blocks) ? errno : 0; /* EXT4_IOC_RESIZE_FS */
	close(fd);
	if (e)
		return req_errno(r, e, "resize");
	return 0;
}
