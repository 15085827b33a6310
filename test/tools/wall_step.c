/* A test tool, preloaded into a process (LD_PRELOAD): its CLOCK_REALTIME is shifted by an
 * offset [ns] that the test writes into a file while the process runs, as a step of the host's
 * wall clock does (NTP correcting a clock that ran ahead, a VM resumed from a snapshot), and its
 * CLOCK_MONOTONIC is left alone.
 *
 * Why not libfaketime: with its monotonic clock left alone (DONT_FAKE_MONOTONIC) libfaketime
 * 0.9.10 fails every clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which is Python 3.11's
 * time.sleep (EINVAL; wolfcw/libfaketime#426): the processes under test broke in ways no clock
 * step causes.
 *
 * WALL_STEP_FILE: a file of 8 bytes, the offset as a little-endian int64 [ns], mapped shared so
 * that a write by the test is seen by the next clock read. Built by test/test_wall_clock_step.py:
 *     cc -shared -fPIC -O2 -o wall_step.so wall_step.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static const volatile int64_t *offset_ns;

static void load(void) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
}

__attribute__((constructor)) static void init(void) {
    load();
    const char *path = getenv("WALL_STEP_FILE");
    if (path == NULL)
        return;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED)
        offset_ns = (const volatile int64_t *)p;
}

static int is_wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    load();
    int result = real_clock_gettime(id, ts);
    if (result == 0 && is_wall(id) && offset_ns != NULL) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + *offset_ns;
        ts->tv_sec = (time_t)(ns / 1000000000LL);
        ts->tv_nsec = (long)(ns % 1000000000LL);
    }
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int result = clock_gettime(CLOCK_REALTIME, &ts);
    if (result == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
