/* SPDX-License-Identifier: MIT */
/*
 * image-oci.c — reading an OCI image layout for image_import (image-store.h):
 * index.json → the manifest for this host's platform → its config (Env,
 * WorkingDir, User) and its layers, each blob's SHA-256 checked against its
 * digest. Archives (oci-archive, docker-archive) become a layout through
 * skopeo first. Layers are applied by image-layer.c.
 */
#include "config.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd-util.h"
#include "id-util.h"
#include "image-layer.h"
#include "image-store.h"
#include "macro.h"
#include "strv.h"

#define JSON_MAX (4 * 1024 * 1024)
#define MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"

static int
open_beneath(int dfd, const char *path)
{
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
					  RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
	int fd = (int)syscall(SYS_openat2, dfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

static bool
digest_ok(const char *d)
{
	if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 71)
		return false;
	for (const char *p = d + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* Open the blob of digest d in the layout. */
static int
blob_open(int layout_fd, const char *d, Reason *why)
{
	char path[128];
	int fd;

	if (!digest_ok(d))
		return reason_set(why, "'%.80s' is no sha256 digest", d ? d : "(none)"), -EINVAL;
	snprintf(path, sizeof(path), "blobs/sha256/%s", d + 7);
	fd = open_beneath(layout_fd, path);
	if (fd < 0)
		reason_set(why, "blob %.80s: %s", d, strerror(-fd));
	return fd;
}

/* Read a JSON file (at most JSON_MAX) and, with a digest, check its SHA-256. */
static int
json_read(int fd, const char *what, const char *digest, json_t **ret, Reason *why)
{
	_cleanup_free_ char *buf = malloc(JSON_MAX + 1);
	unsigned char md[32];
	char hex[65];
	size_t len = 0;
	json_error_t err;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = read(fd, buf + len, JSON_MAX + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return reason_set(why, "%s: %s", what, strerror(errno)), -errno;
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > JSON_MAX)
			return reason_set(why, "%s: larger than 4 MiB", what), -EINVAL;
	}
	if (digest) {
		if (EVP_Digest(buf, len, md, NULL, EVP_sha256(), NULL) != 1)
			return -EIO;
		hex_encode(md, 32, hex);
		if (!streq(digest + 7, hex))
			return reason_set(why,
					  "%s %.80s: digest mismatch (its content is sha256:%s)",
					  what, digest, hex),
			       -EINVAL;
	}
	*ret = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
	if (!*ret || !json_is_object(*ret)) {
		json_decref(*ret);
		return reason_set(why, "%s: not a JSON object: %s", what, err.text), -EINVAL;
	}
	return 0;
}

static const char *
host_arch(void)
{
	struct utsname u;
	static char arch[sizeof(((struct utsname *)0)->machine)];

	if (uname(&u) < 0)
		return "amd64";
	if (streq(u.machine, "x86_64"))
		return "amd64";
	if (streq(u.machine, "aarch64"))
		return "arm64";
	snprintf(arch, sizeof(arch), "%s", u.machine);
	return arch;
}

static bool
platform_ok(json_t *desc)
{
	json_t *p = json_object_get(desc, "platform");
	const char *os, *arch;

	if (!json_is_object(p))
		return true;
	os = json_string_value(json_object_get(p, "os"));
	arch = json_string_value(json_object_get(p, "architecture"));
	return (!os || streq(os, "linux")) && (!arch || streq(arch, host_arch()));
}

/* The manifest digest an index names for this host (nested indexes: once). */
static int
index_pick(int layout_fd, json_t *index, unsigned depth, char *digest, Reason *why)
{
	json_t *ms = json_object_get(index, "manifests"), *m;
	size_t i;

	if (!json_is_array(ms) || json_array_size(ms) == 0)
		return reason_set(why, "index.json names no manifest"), -EINVAL;
	json_array_foreach(ms, i, m)
	{
		const char *mt = json_string_value(json_object_get(m, "mediaType"));
		const char *d = json_string_value(json_object_get(m, "digest"));
		if (!platform_ok(m))
			continue;
		if (mt && (streq(mt, MT_INDEX) || streq(mt, MT_DOCKER_LIST)) && depth == 0) {
			_cleanup_close_ int fd = blob_open(layout_fd, d, why);
			json_t *sub = NULL;
			int r = fd < 0 ? fd : json_read(fd, "index", d, &sub, why);
			if (r >= 0)
				r = index_pick(layout_fd, sub, 1, digest, why);
			json_decref(sub);
			return r;
		}
		if (mt && !streq(mt, MT_MANIFEST) && !streq(mt, MT_DOCKER_MANIFEST))
			continue;
		if (!digest_ok(d))
			return reason_set(why, "a manifest of no sha256 digest"), -EINVAL;
		snprintf(digest, IMAGE_DIGEST_MAX + 1, "%s", d);
		return 0;
	}
	return reason_set(why, "no manifest for linux/%s in the index", host_arch()), -EINVAL;
}

int
image_oci_manifest(int layout_fd, char digest[IMAGE_DIGEST_MAX + 1], Reason *why)
{
	_cleanup_close_ int fd = open_beneath(layout_fd, "index.json");
	json_t *index = NULL;
	int r;

	if (fd < 0)
		return reason_set(why, "index.json: %s", strerror(-fd)), fd;
	r = json_read(fd, "index.json", NULL, &index, why);
	if (r >= 0)
		r = index_pick(layout_fd, index, 0, digest, why);
	json_decref(index);
	return r;
}

/* The config's Env, WorkingDir and User (docs/IMAGES.md "The image's config"). */
static int
config_read(json_t *config, ImageConfig *cfg, Reason *why)
{
	json_t *c = json_object_get(config, "config"), *v;
	const char *os = json_string_value(json_object_get(config, "os"));
	const char *wd, *user;
	size_t i;

	if (os && !streq(os, "linux"))
		return reason_set(why, "the image is for os '%.40s', not linux", os), -EINVAL;
	if (!json_is_object(c))
		return 0;
	wd = json_string_value(json_object_get(c, "WorkingDir"));
	if (wd && wd[0] && !streq(wd, "/") && !streq(wd, "/workspace"))
		return reason_set(why,
				  "the image's WorkingDir is '%.100s': commands run in /workspace "
				  "(the sandbox's workspace); build the image without WORKDIR or "
				  "with WORKDIR /workspace",
				  wd),
		       -EINVAL;
	user = json_string_value(json_object_get(c, "User"));
	if (user && user[0] && !streq(user, "root") && !streq(user, "0") && !streq(user, "0:0") &&
	    !streq(user, "root:root"))
		return reason_set(why,
				  "the image's User is '%.60s': every command of a sandbox runs as "
				  "the sandbox user (sandbox_uid); build the image without USER",
				  user),
		       -EINVAL;
	json_array_foreach(json_object_get(c, "Env"), i, v)
	{
		const char *e = json_string_value(v);
		if (!e || !strchr(e, '=') || e[0] == '=' || strlen(e) > 32768)
			return reason_set(why, "the image's Env has an entry that is no K=V"),
			       -EINVAL;
		if (strv_push(&cfg->env, e) < 0)
			return -ENOMEM;
	}
	return 0;
}

static bool
layer_type_ok(const char *mt)
{
	return !mt || strstr(mt, ".tar") || strstr(mt, "rootfs.diff.tar");
}

int
image_oci_unpack(int layout_fd, const char *digest, ImageUnpack *u, ImageConfig *cfg, Reason *why)
{
	_cleanup_close_ int mfd = blob_open(layout_fd, digest, why), cfd = -1;
	json_t *man = NULL, *config = NULL, *layers, *l;
	size_t i;
	int r;

	if (mfd < 0)
		return mfd;
	r = json_read(mfd, "manifest", digest, &man, why);
	if (r < 0)
		goto out;
	cfd = blob_open(
	    layout_fd, json_string_value(json_object_get(json_object_get(man, "config"), "digest")),
	    why);
	if (cfd < 0) {
		r = cfd;
		goto out;
	}
	r = json_read(cfd, "config",
		      json_string_value(json_object_get(json_object_get(man, "config"), "digest")),
		      &config, why);
	if (r >= 0)
		r = config_read(config, cfg, why);
	if (r < 0)
		goto out;
	layers = json_object_get(man, "layers");
	if (!json_is_array(layers)) {
		reason_set(why, "the manifest has no layers");
		r = -EINVAL;
		goto out;
	}
	json_array_foreach(layers, i, l)
	{
		const char *d = json_string_value(json_object_get(l, "digest"));
		const char *mt = json_string_value(json_object_get(l, "mediaType"));
		_cleanup_close_ int lfd = -1;
		Reason lwhy = {""};
		if (!layer_type_ok(mt)) {
			reason_set(why, "layer %zu: media type '%.100s' is no tar", i, mt);
			r = -EINVAL;
			goto out;
		}
		lfd = blob_open(layout_fd, d, why);
		if (lfd < 0) {
			r = lfd;
			goto out;
		}
		r = image_layer_apply(u, lfd, d, &lwhy);
		if (r < 0) {
			reason_set(why, "layer %zu: %s", i, reason_text(&lwhy, r));
			goto out;
		}
	}
out:
	json_decref(man);
	json_decref(config);
	return r;
}

int
image_skopeo_to_oci(const char *transport, int src_fd, const char *dir, Reason *why)
{
	char src[64], dst[4200], err[512];
	int pipefd[2], st = 0;
	size_t elen = 0;
	pid_t pid;

	snprintf(src, sizeof(src), "%s:/proc/self/fd/3", transport);
	snprintf(dst, sizeof(dst), "oci:%s:image", dir);
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return -errno;
	}
	if (pid == 0) {
		char *argv[] = {"skopeo", "--insecure-policy", "copy", "--quiet", src, dst, NULL};
		int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(pipefd[1], 2) < 0 ||
		    dup2(src_fd, 3) < 0 || close_range(4, ~0U, 0) < 0)
			_exit(126);
		execvp("skopeo", argv);
		dprintf(2, "cannot run skopeo: %s", strerror(errno));
		_exit(127);
	}
	close(pipefd[1]);
	for (;;) {
		ssize_t n = read(pipefd[0], err + elen, sizeof(err) - 1 - elen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		elen += (size_t)n;
		if (elen == sizeof(err) - 1) { /* keep the start; drain the rest */
			char sink[512];
			while (read(pipefd[0], sink, sizeof(sink)) > 0)
				;
			break;
		}
	}
	close(pipefd[0]);
	err[elen] = '\0';
	while (elen > 0 && (err[elen - 1] == '\n' || err[elen - 1] == ' '))
		err[--elen] = '\0';
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return reason_set(why, "skopeo could not read the %s: %s", transport,
				  err[0] ? err : "it failed"),
		       -EINVAL;
	return 0;
}

int
image_archive_kind(int fd, const char **ret, Reason *why)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	bool layout = false, index = false, manifest = false, archive_like = false;
	int r = 0;

	if (!a)
		return -ENOMEM;
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_filter_xz(a);
	archive_read_support_filter_bzip2(a);
	archive_read_support_filter_none(a);
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, fd, 128 * 1024) != ARCHIVE_OK) {
		reason_set(why, "not a tar archive: %s", archive_error_string(a) ?: "unreadable");
		r = -EINVAL;
		goto out;
	}
	for (unsigned n = 0;; n++) {
		int k = archive_read_next_header(a, &e);
		const char *p;
		if (k == ARCHIVE_EOF)
			break;
		if (k < ARCHIVE_WARN) {
			reason_set(why, "a broken or truncated tar: %s",
				   archive_error_string(a) ?: "corrupt");
			r = -EINVAL;
			goto out;
		}
		p = archive_entry_pathname(e);
		if (p && strncmp(p, "./", 2) == 0)
			p += 2;
		if (p) {
			size_t len = strlen(p);
			layout |= streq(p, "oci-layout");
			index |= streq(p, "index.json");
			manifest |= streq(p, "manifest.json");
			/* what image archives hold before their manifest: blobs,
			 * <id>/layer.tar, <id>.json, <digest>.tar, repositories */
			archive_like |=
			    strncmp(p, "blobs/", 6) == 0 || streq(p, "repositories") ||
			    (len > 10 && streq(p + len - 10, "/layer.tar")) ||
			    (!strchr(p, '/') && len > 5 && streq(p + len - 5, ".json")) ||
			    (!strchr(p, '/') && len > 4 && streq(p + len - 4, ".tar"));
		}
		/* A root filesystem shows none of that in its first entries. */
		if (n >= 64 && !layout && !index && !manifest && !archive_like)
			break;
	}
	*ret = layout && index ? "oci-archive" : manifest ? "docker-archive" : "rootfs";
out:
	archive_read_free(a);
	if (lseek(fd, 0, SEEK_SET) < 0 && r >= 0)
		r = -errno;
	return r;
}
