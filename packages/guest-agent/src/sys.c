/* cgroup setup and the sys.* requests. */
#define _GNU_SOURCE
#include "agent.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define CG "/sys/fs/cgroup"
static char session[33];

/* A field of /proc/meminfo at the start of a line ("Cached:" is not "SwapCached:"). */
static long long meminfo_kb(const char *key)
{
	char b[8192];
	size_t kl = strlen(key);
	if (read_small("/proc/meminfo", b, sizeof b) <= 0)
		return -1;
	for (char *p = b; p; p = strchr(p, '\n')) {
		p += *p == '\n';
		if (!strncmp(p, key, kl))
			return atoll(p + kl);
	}
	return -1;
}

void cgroup_setup(void)
{
	char v[64];
	if (access(CG "/cgroup.controllers", F_OK)) {
		logmsg("cgroup2 not mounted at " CG ": running without cgroups");
		g_cgroup = 0;
		return;
	}
	/* "No internal processes": the agent lives in a leaf of its own, so the cgroups
	 * that distribute controllers hold no processes. */
	mkdir(CG "/agent", 0755);
	if (write_str(CG "/agent/cgroup.procs", "0"))
		logmsg("cannot move agent to " CG "/agent");
	if (mkdir(CG "/den", 0755) && errno != EEXIST) {
		logmsg("mkdir " CG "/den: %s: running without cgroups", strerror(errno));
		g_cgroup = 0;
		return;
	}
	/* One controller at a time: a missing one must not block the other. */
	write_str(CG "/cgroup.subtree_control", "+pids");
	write_str(CG "/cgroup.subtree_control", "+memory");
	write_str(CG "/den/cgroup.subtree_control", "+pids");
	write_str(CG "/den/cgroup.subtree_control", "+memory");
	long long kb = meminfo_kb("MemTotal:");
	if (kb > 0) {
		/* Leave headroom so a runaway exec hits its limit before the agent starves. */
		long long bytes = kb * 1024 - (48ll << 20);
		if (bytes < (16ll << 20))
			bytes = 16ll << 20;
		snprintf(v, sizeof v, "%lld", bytes);
		if (write_str(CG "/den/memory.max", v))
			logmsg("cannot set den/memory.max");
	}
	if (write_str(CG "/den/pids.max", "4096"))
		logmsg("cannot set den/pids.max");
}

static int unhex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int op_sys_hello(struct req *r)
{
	const char *s;
	unsigned char sync[24] = {0, 'D', 'E', 'N', 'S', 'Y', 'N', 'C'};
	char boot[64];
	if (arg_str(r, "session", &s, 1) < 0)
		return -1;
	if (strlen(s) != 32)
		return req_err(r, "invalid_argument", "\"session\" must be 32 hex chars");
	for (int i = 0; i < 16; i++) {
		int hi = unhex(s[2 * i]), lo = unhex(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return req_err(r, "invalid_argument", "\"session\" must be 32 hex chars");
		sync[8 + i] = hi << 4 | lo;
	}
	out_clear();
	/* Even for the same session: their queued bytes were just dropped, so the streams
	 * have holes. (A new host has forgotten them anyway.) */
	tunnels_abort_all();
	if (strcasecmp(s, session)) {
		proc_new_session();
		files_abort_all();
		snprintf(session, sizeof session, "%s", s);
	}
	out_raw(sync, sizeof sync);
	ssize_t n = read_small("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
	while (n > 0 && (boot[n - 1] == '\n' || boot[n - 1] == ' '))
		boot[--n] = 0;
	jw_kint(r->w, "protocol", 1);
	jw_kstr(r->w, "agent", AGENT_VERSION);
	jw_kstr(r->w, "boot_id", n > 0 ? boot : "");
	jw_kint(r->w, "pid", getpid());
	/* What this agent does beyond protocol 1's first version: old agents ignore fields they
	 * do not know (an exec's "user"), so the host must ask before relying on them. */
	jw_key(r->w, "features");
	jw_arr(r->w);
	jw_str(r->w, "exec.user");
	jw_str(r->w, "file.owner");
	jw_str(r->w, "file.xattr");
	jw_str(r->w, "sys.metrics");
	jw_str(r->w, "volumes");
	jw_end_arr(r->w);
	return 0;
}

int op_sys_clock(struct req *r)
{
	int64_t ms;
	if (arg_int(r, "unix_ms", &ms, 1) < 0)
		return -1;
	if (ms < 0)
		return req_err(r, "invalid_argument", "bad unix_ms");
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	if (clock_settime(CLOCK_REALTIME, &ts))
		return req_errno(r, errno, "clock_settime");
	return 0;
}

int op_sys_entropy(struct req *r)
{
	const char *s;
	struct {
		int entropy_count, buf_size;
		unsigned char buf[520];
	} rpi;
	size_t n;
	if (arg_str(r, "seed", &s, 1) < 0)
		return -1;
	size_t l = strlen(s);
	if (l > 700 || b64_decode(s, l, rpi.buf, &n) || n < 32 || n > 512)
		return req_err(r, "invalid_argument", "\"seed\" must be 32..512 bytes of base64");
	rpi.entropy_count = n * 8;
	rpi.buf_size = n;
	int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return req_errno(r, errno, "/dev/urandom");
	/* Mix the seed in and reseed now, so snapshot clones diverge immediately. */
	int rc = ioctl(fd, RNDADDENTROPY, &rpi);
	if (!rc)
		rc = ioctl(fd, RNDRESEEDCRNG);
	int e = errno;
	close(fd);
	if (rc)
		return req_errno(r, e, "RNDADDENTROPY");
	return 0;
}

int op_sys_limits(struct req *r)
{
	int64_t n;
	char v[32];
	if (arg_int(r, "pids_max", &n, 1) < 0)
		return -1;
	if (n <= 0)
		return req_err(r, "invalid_argument", "bad pids_max");
	if (!g_cgroup)
		return 0; /* nothing to limit without cgroups (test mode) */
	snprintf(v, sizeof v, "%lld", (long long)n);
	int e = write_str(CG "/den/pids.max", v);
	if (e)
		return req_errno(r, -e, "pids.max");
	return 0;
}

int op_sys_info(struct req *r)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	jw_kint(r->w, "uptime_ms", (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	jw_kint(r->w, "mem_total_kb", meminfo_kb("MemTotal:"));
	jw_kint(r->w, "mem_available_kb", meminfo_kb("MemAvailable:"));
	jw_kint(r->w, "procs_running", proc_running_count());
	return 0;
}

/* Raw counters: the host keeps the previous reading and makes a percentage of the difference. */
int op_sys_metrics(struct req *r)
{
	char b[1024];
	unsigned long long v[8] = {0}, total = 0;
	struct statvfs fs;
	if (read_small("/proc/stat", b, sizeof b) <= 0 || strncmp(b, "cpu ", 4) ||
	    sscanf(b + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 4)
		return req_err(r, "io_error", "/proc/stat: no cpu line");
	for (int i = 0; i < 8; i++)
		total += v[i];
	if (statvfs("/", &fs))
		return req_errno(r, errno, "statvfs /");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long long cached = meminfo_kb("Cached:"), buffers = meminfo_kb("Buffers:");
	jw_kint(r->w, "timestamp_ms", real_ms());
	jw_kint(r->w, "cpu_count", cpus > 0 ? cpus : 1);
	/* USER_HZ ticks since boot, all CPUs; idle and iowait are not busy. */
	jw_kint(r->w, "cpu_total_ticks", total);
	jw_kint(r->w, "cpu_busy_ticks", total - v[3] - v[4]);
	jw_kint(r->w, "mem_total_kb", meminfo_kb("MemTotal:"));
	jw_kint(r->w, "mem_available_kb", meminfo_kb("MemAvailable:"));
	jw_kint(r->w, "mem_cache_kb", (cached > 0 ? cached : 0) + (buffers > 0 ? buffers : 0));
	jw_kint(r->w, "disk_total_bytes", (int64_t)fs.f_blocks * fs.f_frsize);
	jw_kint(r->w, "disk_used_bytes", (int64_t)(fs.f_blocks - fs.f_bfree) * fs.f_frsize);
	return 0;
}
