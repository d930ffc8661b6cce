/* What an Open MPI user sees: MPI_Allreduce and MPI_Bcast timed the way the OSU micro-benchmarks do,
 * with nothing of mpcomm in between. benchmarks/api_latency.cc is the same loop written against mpcomm's
 * public API; the two share their flags, their iteration rule and their JSON rows, so that
 * scripts/perf-check --mpi-plain can print one next to the other.
 *
 *   mpirun [placement] build/benchmarks/plain_mpi [-o allreduce,broadcast,sendrecv] [-b 8] [-e 64M] [-f 2]
 *                                                [-w 10] [-n 100] [-m 10] [-B 1G] [-j FILE]
 *                                                [--nonblocking] [--ibarrier] [--thread-multiple]
 *
 * The placement `mpcomm launch -n N --backend mpi` gives its ranks (src/bootstrap/launcher.cc,
 * mpirun_plan), for N ranks on a host with C cores, as root:
 *
 *   N <= C: mpirun -n N --allow-run-as-root --bind-to core \
 *             --mca pml ob1 --mca btl vader,self --mca btl_tcp_if_include lo build/benchmarks/plain_mpi ...
 *   N >  C: mpirun -n N --allow-run-as-root --oversubscribe --bind-to core:overload-allowed \
 *             --mca pml ob1 --mca btl vader,self --mca btl_tcp_if_include lo build/benchmarks/plain_mpi ...
 *
 * (mpcomm launch also passes --tag-output, -x of its variables and a vader backing folder of its own
 * under /dev/shm, Open MPI's default place; none of them changes how the ranks run.)
 *
 * Method, per op and size (float32 elements, sum; broadcast from rank 0; out of place for allreduce):
 *   1. one checked call: every rank fills its input with rank + 1 (allreduce: every element must come
 *      out as n(n+1)/2) or the root fills 1, 2, ... 1021, 1, ... and the others 0 (broadcast); the
 *      wrong elements of all ranks are summed into "wrong";
 *   2. W warm-up iterations, then I timed ones; an iteration is MPI_Barrier, t0, one call, t1
 *      (clock_gettime(CLOCK_MONOTONIC)); t1 - t0 is that rank's time of that iteration;
 *   3. per rank the median (and mean, min) over the I timed iterations; the row's median_us is the
 *      largest of the ranks' medians (MPI_Reduce MAX to rank 0), min_median_us the smallest.
 * sendrecv (-o sendrecv; not in the default list): a pipeline's ring shift, MPI_Irecv from rank - 1 and
 * MPI_Isend to rank + 1 (tag 0), then MPI_Waitall; the send buffer written afresh before each iteration's
 * barrier; the checked call must deliver rank - 1's pattern (the same loop as api_latency.cc's).
 * Iteration rule (the same in api_latency.cc): I(bytes) = min(n, max(m, B / bytes)) and
 * W(bytes) = max(1, w * I / n): with the defaults 100 timed and 10 warm-up iterations up to 8 MiB,
 * 64 (6 warm-up) at 16 MiB, 32 (3) at 32 MiB, 16 (1) at 64 MiB.
 *
 * Rank 0 prints one JSON object per row to stdout (and appends it to FILE with -j):
 *   {"program":"plain_mpi","backend":"plain","variant":"blocking","op":"allreduce","dtype":"float32",
 *    "bytes":8,"count":2,"ranks":2,"warmup":10,"iters":100,"wrong":0,"median_us":1.23,
 *    "min_median_us":1.10,"mean_us":1.30,"min_us":0.98}
 *
 * Diagnostics, not what a user writes, each one a step towards the MPI calls mpcomm's mpi backend makes
 * (src/backends/mpi): --nonblocking posts MPI_Iallreduce / MPI_Ibcast and completes them with MPI_Wait
 * (variant "nonblocking"); --ibarrier does the barrier with MPI_Ibarrier and MPI_Wait ("+ibarrier");
 * --thread-multiple initialises MPI with MPI_THREAD_MULTIPLE ("+mt"). With all three, what is left
 * between plain_mpi and api_latency is mpcomm's own: its entry point and its MPI_Testall polling. */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

enum op { OP_ALLREDUCE, OP_BROADCAST, OP_SENDRECV };
static const char* op_name(enum op op) { return op == OP_ALLREDUCE ? "allreduce" : op == OP_BROADCAST ? "broadcast" : "sendrecv"; }

struct config {
  int allreduce, broadcast, sendrecv;
  size_t min_bytes, max_bytes;
  double factor;
  int warmup, iters, min_iters;
  size_t budget;
  const char* json;
  int nonblocking, ibarrier, thread_multiple;
};

static int rank, nranks;

static void die(const char* msg) {
  if (rank == 0) fprintf(stderr, "plain_mpi: %s\n", msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

/* "8", "64K", "64M", "1G" */
static size_t parse_bytes(const char* s) {
  char* end;
  double v = strtod(s, &end);
  size_t mult = 1;
  if (*end == 'k' || *end == 'K') mult = (size_t)1 << 10, ++end;
  else if (*end == 'm' || *end == 'M') mult = MiB, ++end;
  else if (*end == 'g' || *end == 'G') mult = (size_t)1 << 30, ++end;
  if (end == s || *end != '\0' || v < 0) die("bad size (want e.g. 8, 64K, 64M)");
  return (size_t)(v * (double)mult);
}

static void usage(void) {
  if (rank == 0)
    printf("usage: plain_mpi [-o allreduce,broadcast,sendrecv] [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-n ITERS]\n"
           "                 [-m MIN_ITERS] [-B BUDGET_BYTES] [-j FILE] [--nonblocking] [--ibarrier]\n"
           "                 [--thread-multiple]\n"
           "defaults: -o allreduce,broadcast -b 8 -e 64M -f 2 -w 10 -n 100 -m 10 -B 1G\n"
           "iterations per size: I = min(n, max(m, B / bytes)), warm-up max(1, w * I / n)\n");
}

static struct config parse(int argc, char** argv) {
  struct config c = {1, 1, 0, 8, 64 * MiB, 2.0, 10, 100, 10, (size_t)1 << 30, NULL, 0, 0, 0};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage();
      MPI_Finalize();
      exit(0);
    } else if (!strcmp(a, "--nonblocking")) {
      c.nonblocking = 1;
    } else if (!strcmp(a, "--ibarrier")) {
      c.ibarrier = 1;
    } else if (!strcmp(a, "--thread-multiple")) {
      c.thread_multiple = 1;
    } else if (v == NULL) {
      die("a flag without its value (-h for help)");
    } else {
      ++i;
      if (!strcmp(a, "-o") || !strcmp(a, "--ops")) {
        c.allreduce = strstr(v, "allreduce") != NULL;
        c.broadcast = strstr(v, "broadcast") != NULL;
        c.sendrecv = strstr(v, "sendrecv") != NULL;
        if (!c.allreduce && !c.broadcast && !c.sendrecv) die("-o takes a comma list of allreduce, broadcast, sendrecv");
      } else if (!strcmp(a, "-b")) c.min_bytes = parse_bytes(v);
      else if (!strcmp(a, "-e")) c.max_bytes = parse_bytes(v);
      else if (!strcmp(a, "-f")) c.factor = atof(v);
      else if (!strcmp(a, "-w")) c.warmup = atoi(v);
      else if (!strcmp(a, "-n")) c.iters = atoi(v);
      else if (!strcmp(a, "-m")) c.min_iters = atoi(v);
      else if (!strcmp(a, "-B")) c.budget = parse_bytes(v);
      else if (!strcmp(a, "-j") || !strcmp(a, "--json")) c.json = v;
      else die("unknown flag (-h for help)");
    }
  }
  if (c.min_bytes < 4) c.min_bytes = 4;
  if (c.factor <= 1.0 || c.iters < 1 || c.min_iters < 1 || c.warmup < 0 || c.max_bytes < c.min_bytes)
    die("want -f > 1, -n >= 1, -m >= 1, -w >= 0, -e >= -b");
  return c;
}

/* The iteration rule (api_latency.cc has the same). */
static int timed_iters(const struct config* c, size_t bytes) {
  size_t by_budget = c->budget / bytes;
  size_t i = by_budget > (size_t)c->min_iters ? by_budget : (size_t)c->min_iters;
  return i < (size_t)c->iters ? (int)i : c->iters;
}
static int warmup_iters(const struct config* c, int iters) {
  int w = (int)((long long)c->warmup * iters / c->iters);
  return c->warmup == 0 ? 0 : w > 1 ? w : 1;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void barrier(const struct config* c) {
  if (c->ibarrier) {
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

/* The pattern rank `from` sends in the ring shift, fresh each iteration `it`. */
static float shift_value(int from, int it, int i) { return (float)((from + 1) * 1000 + (it % 7 + 7) % 7 + i % 251); }

static void call(const struct config* c, enum op op, const float* send, float* recv, int count) {
  if (op == OP_SENDRECV) {
    MPI_Request req[2];
    MPI_Irecv(recv, count, MPI_FLOAT, (rank + nranks - 1) % nranks, 0, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(send, count, MPI_FLOAT, (rank + 1) % nranks, 0, MPI_COMM_WORLD, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
  } else if (c->nonblocking) {
    MPI_Request req;
    if (op == OP_ALLREDUCE)
      MPI_Iallreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    else
      MPI_Ibcast(recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (op == OP_ALLREDUCE) {
    MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else {
    MPI_Bcast(recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
}

/* The send buffer of iteration `it` (sendrecv only). */
static void fill(enum op op, float* send, int count, int it) {
  if (op != OP_SENDRECV) return;
  for (int i = 0; i < count; ++i) send[i] = shift_value(rank, it, i);
}

/* One checked call; returns this rank's wrong elements. */
static long long check(const struct config* c, enum op op, float* send, float* recv, int count) {
  long long wrong = 0;
  if (op == OP_ALLREDUCE) {
    for (int i = 0; i < count; ++i) send[i] = (float)(rank + 1), recv[i] = -1.0f;
    call(c, op, send, recv, count);
    const float want = (float)nranks * (float)(nranks + 1) / 2.0f;
    for (int i = 0; i < count; ++i) wrong += recv[i] != want;
  } else if (op == OP_BROADCAST) {
    for (int i = 0; i < count; ++i) recv[i] = rank == 0 ? (float)(i % 1021 + 1) : 0.0f;
    call(c, op, send, recv, count);
    for (int i = 0; i < count; ++i) wrong += recv[i] != (float)(i % 1021 + 1);
  } else {
    fill(op, send, count, -1);
    for (int i = 0; i < count; ++i) recv[i] = -1.0f;
    call(c, op, send, recv, count);
    for (int i = 0; i < count; ++i) wrong += recv[i] != shift_value((rank + nranks - 1) % nranks, -1, i);
  }
  return wrong;
}

static void row(const struct config* c, enum op op, size_t bytes, float* send, float* recv, double* t) {
  const int count = (int)(bytes / sizeof(float));
  bytes = (size_t)count * sizeof(float);
  long long wrong = check(c, op, send, recv, count), all_wrong = 0;
  const int iters = timed_iters(c, bytes), warm = warmup_iters(c, iters);
  for (int i = -warm; i < iters; ++i) {
    fill(op, send, count, i);
    barrier(c);
    const double t0 = now_us();
    call(c, op, send, recv, count);
    const double t1 = now_us();
    if (i >= 0) t[i] = t1 - t0;
  }
  double sum = 0;
  for (int i = 0; i < iters; ++i) sum += t[i];
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  const double med = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
  /* largest median, largest mean, largest min; then the smallest median */
  double mine[3] = {med, sum / iters, t[0]}, most[3], least_med;
  MPI_Reduce(mine, most, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&med, &least_med, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
  MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  char line[512];
  snprintf(line, sizeof line,
           "{\"program\":\"plain_mpi\",\"backend\":\"plain\",\"variant\":\"%s%s%s\",\"op\":\"%s\",\"dtype\":\"float32\","
           "\"bytes\":%zu,\"count\":%d,\"ranks\":%d,\"warmup\":%d,\"iters\":%d,\"wrong\":%lld,\"median_us\":%.3f,"
           "\"min_median_us\":%.3f,\"mean_us\":%.3f,\"min_us\":%.3f}",
           c->nonblocking ? "nonblocking" : "blocking", c->ibarrier ? "+ibarrier" : "", c->thread_multiple ? "+mt" : "",
           op_name(op), bytes, count, nranks, warm, iters, all_wrong, most[0], least_med,
           most[1], most[2]);
  printf("%s\n", line);
  fflush(stdout);
  if (c->json) {
    FILE* f = fopen(c->json, "a");
    if (!f) die("cannot open the -j file");
    fprintf(f, "%s\n", line);
    fclose(f);
  }
}

int main(int argc, char** argv) {
  int want_multiple = 0;
  for (int i = 1; i < argc; ++i) want_multiple |= !strcmp(argv[i], "--thread-multiple");
  if (want_multiple) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const struct config c = parse(argc, argv);
  if (c.max_bytes / sizeof(float) > (size_t)0x7fffffff) die("-e: at most 2^31 - 1 floats per call");

  const size_t cap = (c.max_bytes + 4095) / 4096 * 4096;
  float* send = aligned_alloc(4096, cap);
  float* recv = aligned_alloc(4096, cap);
  double* t = malloc(sizeof(double) * (size_t)c.iters);
  if (!send || !recv || !t) die("out of memory");
  memset(send, 0, cap);
  memset(recv, 0, cap);

  for (int o = OP_ALLREDUCE; o <= OP_SENDRECV; ++o) {
    const enum op op = (enum op)o;
    if (op == OP_ALLREDUCE ? !c.allreduce : op == OP_BROADCAST ? !c.broadcast : !c.sendrecv) continue;
    for (double b = (double)c.min_bytes; b <= (double)c.max_bytes * (1 + 1e-9); b *= c.factor)
      row(&c, op, (size_t)(b + 0.5), send, recv, t);
  }
  free(send);
  free(recv);
  free(t);
  MPI_Finalize();
  return 0;
}
