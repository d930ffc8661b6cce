// How far apart two CPUs are right now: the round trip of one cache line between a thread on each.
// On a virtual machine the hypervisor moves its virtual CPUs between host cores, and the answer
// changes within minutes (docs/performance.md, "Why runs differ"). build/benchmarks/cpu_placement
// prints it; mpcomm bench records it with every row it measures in turns.
#pragma once

namespace mpcomm {

// Nanoseconds per round trip (the mean of `trips`) between a thread pinned to CPU `a` and one pinned
// to CPU `b`, indexes into this thread's affinity mask; the calling thread runs the CPU-a side and gets
// its own mask back afterwards. NaN when this thread may not use two CPUs or a thread cannot be pinned.
// Both CPUs are busy for the whole measurement: call it while nothing else should run.
double cpu_round_trip_ns(int a, int b, long trips);
// The number of the index-th CPU in the calling thread's affinity mask, or -1.
int cpu_of_index(int index);

}  // namespace mpcomm
