/* --init: PID 1. Mounts the runtime filesystems, supervises the agent (restart with
 * backoff), reaps every orphan, and powers off on SIGPWR/SIGUSR2. */
#define _GNU_SOURCE
#include "agent.h"
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void cons(const char *fmt, ...)
{
	char b[256];
	va_list ap;
	int n = snprintf(b, sizeof b, "den-init: ");
	va_start(ap, fmt);
	vsnprintf(b + n, sizeof b - n - 1, fmt, ap);
	va_end(ap);
	size_t l = strlen(b);
	b[l++] = '\n';
	int fd = open("/dev/console", O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r = write(fd, b, l);
		(void)r;
		close(fd);
	}
}

static void mnt(const char *src, const char *dst, const char *type, unsigned long fl, const char *opts)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, fl, opts) && errno != EBUSY)
		cons("mount %s on %s: %s", type, dst, strerror(errno));
}

static void lo_up(void)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	/* The kernel assigns 127.0.0.1 and ::1 itself once lo is up. */
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		if (ioctl(s, SIOCSIFFLAGS, &ifr))
			cons("lo up: %s", strerror(errno));
	}
	close(s);
}

static pid_t spawn_agent(const char *self)
{
	pid_t pid = fork();
	if (pid)
		return pid;
	sigset_t none;
	sigemptyset(&none);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	char *argv[] = {"den-agent", NULL};
	execv("/proc/self/exe", argv);
	execv(self, argv);
	cons("exec agent: %s", strerror(errno));
	_exit(127);
}

int init_main(char *self)
{
	sigset_t set;
	int backoff = 100;
	pid_t agent = -1;
	int64_t started = 0, restart_at = 0;

	/* Stdio must exist before anything gets forked. */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0) {
			int c = open("/dev/console", O_RDWR | O_NOCTTY);
			if (c < 0)
				c = open("/dev/null", O_RDWR);
			if (c >= 0 && c != fd) {
				dup2(c, fd);
				close(c);
			}
		}
	mnt("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,gid=5,mode=620");
	mnt("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mnt("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mnt("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	mnt("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (sethostname("den", 3))
		cons("sethostname: %s", strerror(errno));
	lo_up();
	write_str("/proc/self/oom_score_adj", "-1000");
	reboot(RB_DISABLE_CAD); /* Ctrl-Alt-Del becomes a SIGINT, which we ignore */

	/* Everything is handled synchronously with sigtimedwait. Signals nobody waits for
	 * (SIGTERM/INT/HUP) are consumed and ignored. */
	sigfillset(&set);
	sigprocmask(SIG_BLOCK, &set, NULL);

	for (;;) {
		int64_t now = mono_ms();
		if (agent < 0 && now >= restart_at) {
			agent = spawn_agent(self);
			started = now;
			if (agent < 0) {
				cons("fork agent: %s", strerror(errno));
				restart_at = now + 2000;
			}
		}
		int64_t wait_ms = agent < 0 ? restart_at - now : 60000;
		if (wait_ms < 0)
			wait_ms = 0;
		struct timespec ts = {.tv_sec = wait_ms / 1000, .tv_nsec = (wait_ms % 1000) * 1000000};
		siginfo_t si;
		int sig = sigtimedwait(&set, &si, &ts);
		if (sig == SIGPWR || sig == SIGUSR2) {
			cons("power off");
			sync();
			reboot(RB_POWER_OFF);
			cons("reboot: %s", strerror(errno));
		}
		/* Reap everything: orphans of every exec end up here. */
		int st;
		pid_t pid;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			if (pid != agent)
				continue;
			now = mono_ms();
			/* Back off only when it keeps dying quickly. */
			backoff = now - started < 5000 ? (backoff * 2 > 2000 ? 2000 : backoff * 2) : 100;
			restart_at = now + backoff;
			agent = -1;
			if (WIFSIGNALED(st))
				cons("agent killed by signal %d; restarting", WTERMSIG(st));
			else
				cons("agent exited with %d; restarting", WEXITSTATUS(st));
		}
	}
}
