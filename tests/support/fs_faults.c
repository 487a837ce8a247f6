/* Filesystem faults at the moments a store is published, for LD_PRELOAD into a
 * child process. LOADERX_FAULT picks one:
 *
 *   fsync_dir_before_rename  fsync of a directory fails with EIO until
 *                            LOADERX_FAULT_AT renames (default 1) have succeeded
 *   fsync_dir_after_rename   fsync of a directory fails with EIO once
 *                            LOADERX_FAULT_AT renames have succeeded
 *   kill_at_rename           the process kills itself with SIGKILL instead of
 *                            making rename number LOADERX_FAULT_AT (default 1)
 *   stop_at_rename           the same with SIGSTOP: the process stays alive,
 *                            holding whatever it holds, until it is killed
 *   link_exdev               every hard link fails with EXDEV, as between two
 *                            filesystems
 *   link_eio                 every hard link fails with EIO
 *
 * Only renameat2 counts as a rename: it is the call publishing makes. */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_int renames_done, renames_started;

static int fault_is(const char *name) {
    const char *s = getenv("LOADERX_FAULT");
    return s && strcmp(s, name) == 0;
}

static int fault_at(void) {
    const char *at = getenv("LOADERX_FAULT_AT");
    return at ? atoi(at) : 1;
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
              unsigned int flags) {
    static int (*real)(int, const char *, int, const char *, unsigned int);
    if (!real) real = dlsym(RTLD_NEXT, "renameat2");
    int n = atomic_fetch_add(&renames_started, 1) + 1;
    if (n == fault_at()) {
        if (fault_is("kill_at_rename")) raise(SIGKILL);
        if (fault_is("stop_at_rename")) raise(SIGSTOP);
    }
    int rc = real(olddirfd, oldpath, newdirfd, newpath, flags);
    if (rc == 0) atomic_fetch_add(&renames_done, 1);
    return rc;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "fsync");
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        int renamed = atomic_load(&renames_done) >= fault_at();
        if ((fault_is("fsync_dir_before_rename") && !renamed) ||
            (fault_is("fsync_dir_after_rename") && renamed)) {
            errno = EIO;
            return -1;
        }
    }
    return real(fd);
}

/* A hard link's failure, when one is asked for; 0 otherwise. */
static int link_fault(void) {
    if (fault_is("link_exdev")) return EXDEV;
    if (fault_is("link_eio")) return EIO;
    return 0;
}

int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags) {
    static int (*real)(int, const char *, int, const char *, int);
    if (!real) real = dlsym(RTLD_NEXT, "linkat");
    int e = link_fault();
    if (e) {
        errno = e;
        return -1;
    }
    return real(olddirfd, oldpath, newdirfd, newpath, flags);
}

int link(const char *oldpath, const char *newpath) {
    static int (*real)(const char *, const char *);
    if (!real) real = dlsym(RTLD_NEXT, "link");
    int e = link_fault();
    if (e) {
        errno = e;
        return -1;
    }
    return real(oldpath, newpath);
}
