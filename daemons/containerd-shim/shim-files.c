/* SPDX-License-Identifier: MIT */
/*
 * shim-files.c — SANDBOX_FILE: workspace file operations for the harness and
 * tools (see shim-files.h; the safety rules are wsfs.h's). The checks run on
 * the loop, the I/O on a worker thread (workq.h), the reply on the loop.
 */
#include "config.h"

#include "shim-files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd-util.h"
#include "log.h"
#include "macro.h"
#include "sandbox-key.h"
#include "workq.h"
#include "wsfs.h"

/* Room for the reply's framing and keys around a file's bytes. */
#define FRAME_OVERHEAD (64 * 1024)

typedef enum FileOp {
	OP_GET,
	OP_READ,
	OP_LIST,
	OP_LSTAT,
	OP_WRITE,
	OP_MKDIR,
	OP_REMOVE,
	OP_RENAME,
	OP_CREATE,
	_OP_MAX,
} FileOp;

static const char *const op_names[_OP_MAX] = {
    [OP_GET] = "get",	    [OP_READ] = "read",	    [OP_LIST] = "list",
    [OP_LSTAT] = "lstat",   [OP_WRITE] = "write",   [OP_MKDIR] = "mkdir",
    [OP_REMOVE] = "remove", [OP_RENAME] = "rename", [OP_CREATE] = "create",
};

static bool
op_writes(FileOp op)
{
	return op >= OP_WRITE;
}

/* The largest file read or written: the config, bounded by the frame. */
size_t
shim_files_cap(const ShimConf *conf)
{
	size_t frame = (size_t)conf->shared.max_frame;
	size_t room = frame > 2 * FRAME_OVERHEAD ? frame - FRAME_OVERHEAD : frame / 2;

	return MIN((size_t)conf->file_api_max_bytes, room);
}

static const char *
type_name(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFREG: return "file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symlink";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	case S_IFCHR: return "char_device";
	case S_IFBLK: return "block_device";
	default: return "unknown";
	}
}

/* The ERROR's reason of an errno (routerd maps it to a status): the first
 * file API row of reasons.def that lists it, else "internal". */
static const char *
err_code(int err)
{
	static const PeerReasonId file_reasons[] = {
	    PEER_REASON_INVALID_PATH,
	    PEER_REASON_ESCAPE,
	    PEER_REASON_NOT_FOUND,
	    PEER_REASON_IS_DIRECTORY,
	    PEER_REASON_NOT_A_REGULAR_FILE,
	    PEER_REASON_TOO_LARGE,
	    PEER_REASON_EXISTS,
	    PEER_REASON_NOT_EMPTY,
	    PEER_REASON_PERMISSION_DENIED,
	    PEER_REASON_NO_SPACE,
	    PEER_REASON_BUSY,
	};
	return peer_reason_of_errno(err, file_reasons, ELEMENTSOF(file_reasons), REASON_INTERNAL);
}

static const char *
err_text(int err, FileOp op, size_t cap)
{
	static char buf[96];

	switch (err) {
	case -EINVAL:
		return "the path must be relative, without '.', '..', empty components or a "
		       "trailing slash";
	case -ENAMETOOLONG:
		return "the path is too long (at most 4096 bytes, 256 components of 255 bytes)";
	case -EILSEQ: return "the path is not valid UTF-8";
	case -EXDEV:
	case -ELOOP: return "the path leaves the workspace (symlink, magic link or mount)";
	case -ENOENT: return "no such file or directory";
	case -ENOTDIR: return "a component of the path is not a directory";
	case -EISDIR: return "is a directory";
	case -ENOTSUP:
		return op == OP_WRITE ? "the target is a FIFO, socket or device"
				      : "not a regular file or directory";
	case -EFBIG:
		snprintf(buf, sizeof(buf), "the file is larger than the cap of %zu bytes", cap);
		return buf;
	case -E2BIG:
		if (op == OP_REMOVE)
			snprintf(buf, sizeof(buf),
				 "the tree has more than %d entries (those removed are gone; "
				 "repeat)",
				 SHIM_FILES_REMOVE_MAX);
		else
			snprintf(buf, sizeof(buf), "the directory has more than %d entries",
				 SHIM_FILES_LIST_MAX);
		return buf;
	case -EEXIST: return "the target exists";
	case -ENOTEMPTY: return "the directory is not empty";
	case -ESTALE: return "the file changed while it was opened; retry";
	default: return strerror(-err);
	}
}

static void
reply_err(Peer *p, uint64_t req_id, int err, const char *code, const char *text)
{
	(void)peer_reply_error_reason(p, req_id, err, code, text);
}

/* ---------------------------------------------------------------------------
 * The operations, on a worker thread (workq.h): they fill the job's reply
 * body or return a negative errno, and touch nothing but the job.
 */

typedef struct FileJob FileJob;
struct FileJob {
	WorkItem w; /* first */
	ShimFiles *owner;
	FileJob *next, *prev; /* owner->jobs, the loop's */
	PeerDeferred *reply;  /* detached once its connection closed */
	FileOp op;
	char id[17];
	char *key, *ws, *path, *to, *data; /* the loop's allocations */
	size_t dlen, cap;
	int64_t mode;
	bool parents, recursive, force, overwrite, created_ws;
	uid_t uid;
	/* Results. */
	int err;
	bool has_body;
	MpWriter body;
};

struct ShimFiles {
	WorkQ *q;
	FileJob *jobs;
};

static void
pack_stat(MpWriter *w, const char *name, mode_t mode, uint64_t size, int64_t mtime_ns)
{
	mp_w_map(w, name ? 5 : 4);
	if (name)
		mp_w_str(w, "name", name);
	mp_w_str(w, "type", type_name(mode));
	mp_w_uint(w, "mode", mode & 07777);
	mp_w_uint(w, "size", size);
	mp_w_int(w, "mtime_ns", mtime_ns);
}

/* A list reply ({entries} or {type:"directory", entries}). */
static int
do_list(MpWriter *w, int ws_fd, const char *path, bool typed)
{
	WsfsEntry *v = NULL;
	size_t n = 0;
	int r = 0;

	if (ws_fd >= 0)
		r = wsfs_list(ws_fd, path, SHIM_FILES_LIST_MAX, &v, &n);
	else if (path[0] != '\0')
		r = -ENOENT;
	if (r < 0)
		return r;
	mp_w_map(w, typed ? 2 : 1);
	if (typed)
		mp_w_str(w, "type", "directory");
	mp_w_key(w, "entries");
	msgpack_pack_array(&w->pk, n);
	for (size_t i = 0; i < n; i++)
		pack_stat(w, v[i].name, v[i].mode, v[i].size, v[i].mtime_ns);
	wsfs_entries_free(v, n);
	return 0;
}

static int
do_read(MpWriter *w, int ws_fd, const char *path, size_t cap, bool typed)
{
	_cleanup_free_ char *data = NULL;
	size_t len = 0;
	int r;

	if (path[0] == '\0')
		return typed ? do_list(w, ws_fd, path, true) : -EISDIR;
	if (ws_fd < 0)
		return -ENOENT;
	r = wsfs_read(ws_fd, path, cap, &data, &len);
	if (r == -EISDIR && typed)
		return do_list(w, ws_fd, path, true);
	if (r < 0)
		return r;
	mp_w_map(w, typed ? 2 : 1);
	if (typed)
		mp_w_str(w, "type", "file");
	mp_w_bin(w, "data", data, len);
	return 0;
}

static int
do_lstat(MpWriter *w, int ws_fd, const char *path)
{
	struct stat st;
	int r = 0;

	if (ws_fd < 0 && path[0] != '\0')
		return -ENOENT;
	if (ws_fd < 0) /* the root of a workspace not made yet: an empty directory */
		st = (struct stat){.st_mode = S_IFDIR | 0700};
	else if (path[0] == '\0')
		r = RET_NERRNO(fstat(ws_fd, &st));
	else
		r = wsfs_stat(ws_fd, path, &st);
	if (r < 0)
		return r;
	pack_stat(w, NULL, st.st_mode, (uint64_t)st.st_size,
		  (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	return 0;
}

static int
do_write(MpWriter *w, int ws_fd, const char *path, const void *data, size_t len, int64_t mode,
	 bool parents)
{
	struct stat st;
	bool created;
	int r;

	if (parents && strchr(path, '/')) {
		_cleanup_free_ char *dir = strndup(path, (size_t)(strrchr(path, '/') - path));
		if (!dir)
			return -ENOMEM;
		r = wsfs_mkdir_parents(ws_fd, dir, 0755, NULL);
		if (r == -EEXIST)
			r = -ENOTDIR; /* a parent is a file */
		if (r < 0)
			return r;
	}
	r = wsfs_stat(ws_fd, path, &st);
	if (r < 0 && r != -ENOENT)
		return r;
	created = r == -ENOENT;
	/* wsfs_write would replace a FIFO, socket or device by a file; refusing
	 * is clearer (and a race that plants one meanwhile is still replaced, never
	 * written through). */
	if (!created && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
		return S_ISDIR(st.st_mode) ? -EISDIR : -ENOTSUP;
	if (mode < 0)
		mode = !created && S_ISREG(st.st_mode) ? (int64_t)(st.st_mode & 0777) : 0644;
	r = wsfs_write(ws_fd, path, data, len, (mode_t)mode);
	if (r < 0)
		return r;
	mp_w_map(w, 1);
	mp_w_bool(w, "created", created);
	return 0;
}

static int
job_op(FileJob *j, int ws_fd, MpWriter *w)
{
	switch (j->op) {
	case OP_GET: return do_read(w, ws_fd, j->path, j->cap, true);
	case OP_READ: return do_read(w, ws_fd, j->path, j->cap, false);
	case OP_LIST: return do_list(w, ws_fd, j->path, false);
	case OP_LSTAT: return do_lstat(w, ws_fd, j->path);
	case OP_WRITE: return do_write(w, ws_fd, j->path, j->data, j->dlen, j->mode, j->parents);
	case OP_CREATE:
		/* the workspace is there: made by the handler, or it was */
		mp_w_map(w, 1);
		mp_w_bool(w, "created", j->created_ws);
		return 0;
	case OP_MKDIR:
		if (j->parents) {
			bool created = false;
			mode_t mode = j->mode < 0 ? 0755 : (mode_t)j->mode;
			int r = wsfs_mkdir_parents(ws_fd, j->path, mode, &created);
			if (r == 0) {
				mp_w_map(w, 1);
				mp_w_bool(w, "created", created);
			}
			return r;
		}
		__attribute__((fallthrough));
	case OP_REMOVE:
	case OP_RENAME: {
		int r =
		    j->op == OP_MKDIR
			? wsfs_mkdir(ws_fd, j->path, j->mode < 0 ? 0755 : (mode_t)j->mode)
		    : j->op == OP_REMOVE
			? (j->recursive ? wsfs_remove_tree(ws_fd, j->path, SHIM_FILES_REMOVE_MAX)
					: wsfs_remove(ws_fd, j->path))
			: wsfs_rename(ws_fd, j->path, j->to, j->overwrite);
		if (r == -ENOENT && j->op == OP_REMOVE && j->force)
			r = 0; /* rm -f: gone is what was asked */
		if (r == 0)
			mp_w_map(w, 0);
		return r;
	}
	default: return -EINVAL;
	}
}

/* WorkItem.run: open the workspace (a fd of the job's own, valid until it
 * ends), switch to the sandbox user (this thread only: fsuid is per thread;
 * the worker's umask is 0) and do the operation. */
static void
job_run(WorkItem *item)
{
	FileJob *j = (FileJob *)item;
	_cleanup_close_ int ws_fd = -1;
	uid_t prev;

	ws_fd = open(j->ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (ws_fd < 0 && j->op == OP_REMOVE && j->force && errno == ENOENT) {
		mp_writer_init(&j->body); /* rm -f in a workspace never made */
		j->has_body = true;
		mp_w_map(&j->body, 0);
		return;
	}
	if (ws_fd < 0 && (errno != ENOENT || op_writes(j->op))) {
		j->err = -errno;
		return;
	}
	prev = wsfs_as_user(j->uid);
	mp_writer_init(&j->body);
	j->has_body = true;
	j->err = job_op(j, ws_fd, &j->body);
	(void)wsfs_as_user(prev);
}

static void
job_free(FileJob *j)
{
	if (!j)
		return;
	if (j->has_body)
		mp_writer_done(&j->body);
	peer_deferred_free(j->reply);
	free(j->key);
	free(j->ws);
	free(j->path);
	free(j->to);
	free(j->data);
	free(j);
}

/* WorkItem.done, on the loop: answer (if the connection is still there). */
static void
job_done(WorkItem *item, bool cancelled)
{
	FileJob *j = (FileJob *)item;
	ShimFiles *fs = j->owner;
	int k = cancelled ? -ECANCELED : j->err;

	if (j->prev)
		j->prev->next = j->next;
	else
		fs->jobs = j->next;
	if (j->next)
		j->next->prev = j->prev;
	if (k == 0 && op_writes(j->op)) {
		LogCtx ctx = {.thread_id = j->key, .sandbox_id = j->id};
		log_ctx(LOG_DEBUG, &ctx, "File API %s in the workspace of %s", op_names[j->op],
			j->id);
	}
	if (peer_deferred_peer(j->reply)) {
		if (k == 0)
			(void)peer_deferred_reply(TAKE_PTR(j->reply), &j->body);
		else if (k == -ECANCELED)
			(void)peer_deferred_error(TAKE_PTR(j->reply), -EBUSY, REASON_UNAVAILABLE,
						  "containerd-shim is stopping");
		else {
			if (streq(err_code(k), REASON_INTERNAL))
				log_warning_errno(k, "File API %s on sandbox %s failed: %m",
						  op_names[j->op], j->id);
			(void)peer_deferred_error(TAKE_PTR(j->reply), k, err_code(k),
						  err_text(k, j->op, j->cap));
		}
	}
	job_free(j);
}

int
shim_files_new(struct event_base *base, ShimFiles **ret)
{
	ShimFiles *fs = calloc(1, sizeof(*fs));
	int r;

	if (!fs)
		return -ENOMEM;
	r = workq_new(base, SHIM_FILES_THREADS, SHIM_FILES_MAX_JOBS, &fs->q);
	if (r < 0) {
		free(fs);
		return r;
	}
	*ret = fs;
	return 0;
}

ShimFiles *
shim_files_free(ShimFiles *fs)
{
	if (!fs)
		return NULL;
	/* Answers the jobs (those whose connection is gone: nothing is sent). */
	workq_free(fs->q);
	free(fs);
	return NULL;
}

bool
shim_files_changing(ShimFiles *fs, const char *id)
{
	for (FileJob *j = fs ? fs->jobs : NULL; j; j = j->next)
		if (op_writes(j->op) && streq(j->id, id))
			return true;
	return false;
}

/* Copy a path field (str or bin, so that a NUL is a typed error, not a
 * malformed frame) after wsfs's checks; "" allowed when root_ok. */
static int
take_path(const void *v, size_t len, bool root_ok, char **ret)
{
	int r = len == 0 && root_ok ? 0 : wsfs_check_path(v, len);

	if (r < 0)
		return r;
	*ret = strndup(v, len);
	return *ret ? 0 : -ENOMEM;
}

/* The id is 64 bits of a hash: the directory must be this key's
 * (sandbox-key.h). A write or mkdir makes and claims it. False: it is not (or
 * cannot be checked), and the request was answered. */
static bool
key_owns_dir(const ShimConf *conf, Peer *p, uint64_t req_id, const char *key, const char *id,
	     FileOp op)
{
	LogCtx kctx = {.thread_id = key, .sandbox_id = id};
	_cleanup_close_ int dfd = open(conf->sandbox_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int k;

	k = dfd < 0 ? -errno
		    : sandbox_key_claim(dfd, id, key, strlen(key), SANDBOX_KEY_MAX,
					op == OP_WRITE || op == OP_MKDIR || op == OP_CREATE);
	if (k == -ENOENT && dfd < 0 && !op_writes(op))
		k = 0; /* no sandbox_dir yet: nothing to read */
	if (k < 0) {
		if (k == -EEXIST)
			log_ctx(LOG_ERR, &kctx,
				"Sandbox id collision: the directory of %s belongs to "
				"another key than '%s'",
				id, key);
		else
			log_ctx_errno(LOG_WARNING, k, &kctx,
				      "Cannot check the key of sandbox %s: %m", id);
		reply_err(p, req_id, -EIO, REASON_INTERNAL,
			  k == -EEXIST ? "sandbox id collision: the workspace belongs to "
					 "another key"
				       : "cannot check the workspace's key");
		return false;
	}
	return true;
}

int
shim_files_handle(ShimFiles *fs, Shim *s, const ShimConf *conf, ShimPrepareWorkspace prepare,
		  ShimWorkspaceBusy busy, Peer *p, const Frame *f, const Msg_SANDBOX_FILE *m)
{
	const char *key = m->key, *opname = m->op;
	const void *pv = m->path, *tv = m->has_to ? m->to : NULL,
		   *data = m->has_data ? m->data : NULL;
	size_t plen = m->path_len, tlen = m->to_len, dlen = m->data_len;
	_cleanup_free_ char *path = NULL, *to = NULL, *ws = NULL;
	size_t cap = shim_files_cap(conf);
	FileJob *j = NULL;
	int64_t mode = m->has_mode ? m->mode : -1;
	FileOp op = _OP_MAX;
	char id[17];
	int k;

	for (int i = 0; i < _OP_MAX; i++)
		if (streq(opname, op_names[i]))
			op = (FileOp)i;
	if (shim_sandbox_id(key, strlen(key), id) < 0 || op == _OP_MAX ||
	    (op == OP_RENAME) != (tv != NULL) || (op == OP_WRITE) != (data != NULL) ||
	    (mode != -1 && (op != OP_WRITE && op != OP_MKDIR)) || mode < -1 || mode > 07777 ||
	    (m->parents && op != OP_WRITE && op != OP_MKDIR) ||
	    ((m->recursive || m->force) && op != OP_REMOVE) || (m->overwrite && op != OP_RENAME) ||
	    (op == OP_CREATE && plen != 0)) {
		reply_err(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
			  "key must be 1..256 bytes, op one of get, read, list, lstat, "
			  "write, mkdir, remove, rename, create (rename needs to, write data; "
			  "create the path \"\"), mode 0..07777 for write and mkdir "
			  "only, parents for write and mkdir, recursive and force for remove, "
			  "overwrite for rename");
		k = 0;
		goto out;
	}
	if (mode > 0777) {
		reply_err(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
			  "mode must be permission bits (at most 0777)");
		k = 0;
		goto out;
	}
	if (!key_owns_dir(conf, p, f->req_id, key, id, op)) {
		k = 0;
		goto out;
	}
	if (op_writes(op) && busy(s, id)) {
		/* A change would be half in the archive, or lost with the old tree. */
		reply_err(p, f->req_id, -EBUSY, REASON_BUSY,
			  "a snapshot or restore of this workspace is running");
		k = 0;
		goto out;
	}
	if (op == OP_WRITE && dlen > cap) {
		k = -EFBIG;
		goto fail;
	}
	k = take_path(pv, plen, op <= OP_LSTAT || op == OP_CREATE, &path);
	if (k == 0 && op == OP_RENAME)
		k = take_path(tv, tlen, false, &to);
	if (k < 0)
		goto fail;
	if (workq_in_flight(fs->q) >= SHIM_FILES_MAX_JOBS) {
		reply_err(p, f->req_id, -EBUSY, REASON_OVERLOADED,
			  "too many file operations in progress; retry later");
		k = 0;
		goto out;
	}

	LogCtx ctx = {.thread_id = key, .sandbox_id = id};
	if (asprintf(&ws, "%s/%s/workspace", conf->sandbox_dir, id) < 0) {
		ws = NULL;
		k = -ENOMEM;
		goto out;
	}
	/* A write, mkdir or create makes the workspace like sandbox creation
	 * does (one lookup on the loop; the rare creation too: it is shim state). */
	bool created_ws = false;
	if ((op == OP_WRITE || op == OP_MKDIR || op == OP_CREATE) &&
	    faccessat(AT_FDCWD, ws, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
		created_ws = true;
		free(ws);
		ws = NULL;
		k = prepare(s, id, &ws, NULL);
		if (k < 0) {
			log_ctx_errno(LOG_WARNING, k, &ctx,
				      "Cannot prepare the workspace of %s: %m", id);
			goto fail;
		}
	}

	j = calloc(1, sizeof(*j));
	if (!j || !(j->key = strdup(key)) || (dlen > 0 && !(j->data = malloc(dlen))) ||
	    !(j->reply = peer_defer(p, f))) {
		job_free(j);
		k = -ENOMEM;
		goto out;
	}
	if (dlen > 0)
		memcpy(j->data, data, dlen);
	j->w.run = job_run;
	j->w.done = job_done;
	j->owner = fs;
	j->op = op;
	memcpy(j->id, id, sizeof(id));
	j->ws = TAKE_PTR(ws);
	j->path = TAKE_PTR(path);
	j->to = TAKE_PTR(to);
	j->dlen = dlen;
	j->cap = cap;
	j->mode = mode;
	j->parents = m->parents;
	j->recursive = m->recursive;
	j->force = m->force;
	j->overwrite = m->overwrite;
	j->created_ws = created_ws;
	j->uid = (uid_t)conf->host_uid;
	k = workq_submit(fs->q, &j->w);
	if (k < 0) { /* cannot be full: checked above */
		job_free(j);
		goto fail;
	}
	j->next = fs->jobs;
	if (fs->jobs)
		fs->jobs->prev = j;
	fs->jobs = j;
	k = 0;
	goto out;
fail:
	if (streq(err_code(k), REASON_INTERNAL))
		log_warning_errno(k, "File API %s on sandbox %s failed: %m", opname, id);
	reply_err(p, f->req_id, k, err_code(k), err_text(k, op, cap));
	k = 0;
out:
	return k;
}
