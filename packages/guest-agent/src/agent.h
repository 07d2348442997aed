/* Shared declarations of the agent: limits, frame I/O, the event loop, request helpers. */
#ifndef DEN_AGENT_H
#define DEN_AGENT_H
#include "buf.h"
#include "json.h"
#include "util.h"
#include <stdint.h>

#define AGENT_VERSION "den-agent/0.2.0"
#define MAX_PAYLOAD (1u << 20)
#define DATA_MAX 65536
/* Output queue limits: above SOFT we stop reading child output and files; above HARD we
 * stop taking requests from the host, so the queue can't grow without bound. */
#define OUTQ_SOFT (1u << 20)
#define OUTQ_HARD (4u << 20)

enum { F_REQ = 1, F_RES, F_EVENT, F_DATA, F_EOF, F_CREDIT, F_SYNC };
enum { CH_STDIN = 0, CH_STDOUT = 1, CH_STDERR = 2, CH_FILE = 3 };

/* ---- channel.c: connection to the host and frame I/O ---- */
void conn_init(const char *socket_path);
int conn_up(void);
void conn_tick(int64_t now);
void conn_prepare(void);
void conn_event(short revents);
void conn_process_input(void);
void conn_flush(void);
size_t outq_size(void);
void out_clear(void);
void out_raw(const void *p, size_t n);
void out_frame(int type, uint32_t id, const void *p, size_t n);
void out_json(int type, uint32_t id, const struct buf *json);
void out_eof(uint32_t id, int ch);
void out_credit(uint32_t id, int ch, uint32_t n);
/* Reads up to max bytes from fd straight into a DATA frame. Returns read()'s result. */
ssize_t out_data_from_fd(uint32_t id, int ch, int fd, size_t max);
/* Whether stream output may be produced now (connected and queue below SOFT). */
int out_room(void);

/* ---- main.c: event loop ---- */
enum { W_SIG, W_CONN, W_POUT, W_PIN, W_DISCARD, W_FREAD, W_TUNNEL };
void watch(int fd, short events, int kind, void *ptr, int ch);
void timer_at(int64_t when_ms);
extern int g_cgroup; /* cgroups v2 in use */

/* ---- requests ---- */
struct req {
	uint32_t id;
	const struct jv *a; /* the request object */
	struct jw *w;       /* RES object, already opened with "ok":true */
	const char *code;
	char msg[256];
};
#define OP_DEFER 1 /* handler will send the RES later */
int req_err(struct req *r, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* File-style errno mapping (file_not_found, ...). */
int req_errno(struct req *r, int err, const char *what);
const char *errno_code(int err);
/* Argument getters: 1 = present, 0 = absent (if !required), -1 = error already set. */
int arg_str(struct req *r, const char *k, const char **out, int required);
int arg_int(struct req *r, const char *k, int64_t *out, int required);
int arg_bool(struct req *r, const char *k, int *out);
int arg_path(struct req *r, const char *k, const char **out);
/* Sends a complete RES for a deferred request. */
void send_res_ok(uint32_t id, const struct buf *fields);

/* ---- users.c: guest users from /etc/passwd and /etc/group ---- */
#define USER_NAME_MAX 32
#define USER_GROUPS_MAX 64
struct guser {
	char name[USER_NAME_MAX + 1];
	uid_t uid;
	gid_t gid;
	char home[4096];
	gid_t groups[USER_GROUPS_MAX]; /* the primary group first */
	int ngroups, found;
};
/* 0, or -1 with the error set: an unknown user is invalid_argument. */
int user_lookup(struct req *r, const char *name, struct guser *u);
/* The request's optional "user": 1 = found, 0 = absent, -1 = error already set. */
int arg_user(struct req *r, struct guser *u);

/* ---- proc*.c ---- */
void proc_init(void);
void proc_tick(int64_t now);
void proc_prepare(void);
void proc_event(int kind, void *ptr, int ch, short revents);
void proc_sigchld(int sigfd);
void proc_new_session(void);
void proc_on_data(uint32_t id, const char *p, size_t n);
void proc_on_eof(uint32_t id);
void proc_on_credit(uint32_t id, int ch, uint32_t n);
int proc_running_count(void);
int op_exec(struct req *r);
int op_proc_list(struct req *r);
int op_proc_read(struct req *r);
int op_proc_wait(struct req *r);
int op_proc_stdin(struct req *r);
int op_proc_signal(struct req *r);
int op_proc_kill(struct req *r);
int op_proc_release(struct req *r);
int op_pty_resize(struct req *r);

/* ---- files.c ---- */
void files_tick(void);
void files_prepare(void);
void files_event(void *ptr, short revents);
void files_abort_all(void);
void file_on_data(uint32_t id, const char *p, size_t n);
void file_on_eof(uint32_t id);
void file_on_credit(uint32_t id, uint32_t n);
int op_file_read(struct req *r);
int op_file_write(struct req *r);
int op_file_stat(struct req *r);
int op_file_list(struct req *r);
int op_file_mkdir(struct req *r);
int op_file_remove(struct req *r);
int op_file_rename(struct req *r);
int op_stream_cancel(struct req *r);

/* ---- xattr.c ---- */
int op_file_setxattr(struct req *r);
int op_file_getxattrs(struct req *r);

/* ---- tunnel.c ---- */
void tunnels_tick(int64_t now);
void tunnels_prepare(void);
void tunnels_event(void *ptr, short revents);
void tunnels_abort_all(void);
void tunnel_cancel(uint32_t id);
/* Stream frames for a tunnel's id: 1 = handled (the id is a tunnel), 0 = not a tunnel. */
int tunnel_on_data(uint32_t id, const char *p, size_t n);
int tunnel_on_eof(uint32_t id);
int tunnel_on_credit(uint32_t id, uint32_t n);
int op_tcp_connect(struct req *r);
int op_net_ports(struct req *r);

/* ---- sys.c ---- */
void cgroup_setup(void);
int op_sys_hello(struct req *r);
int op_sys_ping(struct req *r);
int op_sys_clock(struct req *r);
/* ---- netcfg.c ---- */
int op_net_setup(struct req *r);
int op_sys_entropy(struct req *r);
int op_sys_limits(struct req *r);
int op_sys_info(struct req *r);
int op_sys_metrics(struct req *r);
/* ---- vol.c: Den volumes in the VM's disk slots ---- */
int op_vol_mount(struct req *r);
int op_vol_release(struct req *r);
int op_vol_detach(struct req *r);
int op_vol_grow(struct req *r);
/* files.c: path and missing parents (made owned by u, if given); 0 or -errno */
int mkdir_p(const char *path, mode_t mode, const struct guser *u);

/* ---- init.c ---- */
int init_main(char *self);
#endif
