/* A program that looks files up through io_uring, as libuv (UV_USE_IO_URING=1), tokio-uring
 * or a hand-written tool may: the lookup is done by the kernel's io_uring workers, so no
 * `openat`/`statx` call of the process shows it to a tracer. Where `io_uring_setup` fails it
 * falls back to the plain calls, as those libraries do.
 *
 *   uring_read cat PATH    print the file's bytes ("absent" when it cannot be opened)
 *   uring_read test PATH   print "present" or "absent"
 *
 * Built by the end-to-end tests with the system's C compiler (tests/tests/trace_uring.rs). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int ring_fd = -1;
static struct io_uring_params params;
static char *sq_ring, *cq_ring;
static struct io_uring_sqe *sqes;

static int ring_open(void) {
  memset(&params, 0, sizeof params);
  ring_fd = (int)syscall(__NR_io_uring_setup, 4, &params);
  if (ring_fd < 0) return -1;
  size_t sq_size = params.sq_off.array + params.sq_entries * sizeof(unsigned);
  size_t cq_size = params.cq_off.cqes + params.cq_entries * sizeof(struct io_uring_cqe);
  if (params.features & IORING_FEAT_SINGLE_MMAP) {
    if (cq_size > sq_size) sq_size = cq_size;
  }
  sq_ring = mmap(0, sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring_fd,
                 IORING_OFF_SQ_RING);
  if (sq_ring == MAP_FAILED) return -1;
  if (params.features & IORING_FEAT_SINGLE_MMAP) {
    cq_ring = sq_ring;
  } else {
    cq_ring = mmap(0, cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring_fd,
                   IORING_OFF_CQ_RING);
    if (cq_ring == MAP_FAILED) return -1;
  }
  sqes = mmap(0, params.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_POPULATE, ring_fd, IORING_OFF_SQES);
  return sqes == MAP_FAILED ? -1 : 0;
}

/* Submits one SQE, waits for its completion and returns the CQE's result (-1 when the
 * submission itself failed). */
static int ring_submit(const struct io_uring_sqe *sqe) {
  unsigned *tail = (unsigned *)(sq_ring + params.sq_off.tail);
  unsigned mask = *(unsigned *)(sq_ring + params.sq_off.ring_mask);
  unsigned *array = (unsigned *)(sq_ring + params.sq_off.array);
  unsigned t = *tail, idx = t & mask;
  sqes[idx] = *sqe;
  array[idx] = idx;
  __atomic_store_n(tail, t + 1, __ATOMIC_RELEASE);
  if (syscall(__NR_io_uring_enter, ring_fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) return -1;
  unsigned *head = (unsigned *)(cq_ring + params.cq_off.head);
  unsigned cmask = *(unsigned *)(cq_ring + params.cq_off.ring_mask);
  struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq_ring + params.cq_off.cqes);
  unsigned h = __atomic_load_n(head, __ATOMIC_ACQUIRE);
  int res = cqes[h & cmask].res;
  __atomic_store_n(head, h + 1, __ATOMIC_RELEASE);
  return res;
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  const char *path = argv[2];
  int uring = ring_open() == 0;
  if (strcmp(argv[1], "test") == 0) {
    int present;
    if (uring) {
      struct statx st;
      struct io_uring_sqe sqe;
      memset(&sqe, 0, sizeof sqe);
      sqe.opcode = IORING_OP_STATX;
      sqe.fd = AT_FDCWD;
      sqe.addr = (uint64_t)(uintptr_t)path;
      sqe.len = STATX_BASIC_STATS;
      sqe.off = (uint64_t)(uintptr_t)&st;
      present = ring_submit(&sqe) == 0;
    } else {
      present = access(path, F_OK) == 0;
    }
    puts(present ? "present" : "absent");
    return 0;
  }
  int fd;
  if (uring) {
    struct io_uring_sqe sqe;
    memset(&sqe, 0, sizeof sqe);
    sqe.opcode = IORING_OP_OPENAT;
    sqe.fd = AT_FDCWD;
    sqe.addr = (uint64_t)(uintptr_t)path;
    sqe.open_flags = O_RDONLY;
    fd = ring_submit(&sqe);
  } else {
    fd = open(path, O_RDONLY);
  }
  if (fd < 0) {
    puts("absent");
    return 0;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)n, stdout);
  return 0;
}
