// The auto backend's built-in table: which backend runs a call when neither MPCOMM_TUNING nor a table
// stored for this machine has an auto section (route_table.h). Data only: `mpcomm tune --backends all` on
// the machine its header names (2 vCPUs, one Intel Xeon host, Open MPI 4.1, Gloo 0.5), for the shapes of
// `mpcomm compare` (8 ranks on 1 host, 8 ranks on 4 emulated hosts, 2 ranks) and its ops, 8 B to 64 MiB:
//   for s in "--ranks 8" "--ranks 8 --hosts 4" "--ranks 2"; do
//     mpcomm tune --backends all $s -b 8 -e 16M -f 4 -n 40 -w 10 --rounds 3 -o builtin.table; done
// (the two CPUs far apart, 335 ns a cache line's round trip, for the 2-rank rows). Each row: the fastest
// backend at its size (at=) by the median over three rounds of each backend's median, with every backend's
// (us=); the last row of an op holds to any size. A call no row matches (another shape, another
// placement of the first two CPUs) runs where this machine's profile predicts fastest, else on native (router.h).
#include "backends/auto/route_table.h"

namespace mpcomm::autosel {

namespace {

constexpr std::string_view kAuto = R"(mpcomm-tuning 1 backend=auto machine=Intel_R_Xeon_R_Processor.c2.g0.h1
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[0,16) -> mpi at=4 us=gloo:102.3,mpi:0.51,native:0.65
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[16,64) -> mpi at=16 us=gloo:138.1,mpi:0.60,native:0.67
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[64,256) -> mpi at=64 us=gloo:121.0,mpi:0.67,native:0.72
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[256,1K) -> mpi at=256 us=gloo:110.5,mpi:0.83,native:0.86
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[1K,4K) -> native at=1K us=gloo:89.6,mpi:1.52,native:1.24
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[4K,16K) -> native at=4K us=gloo:106.2,mpi:2.89,native:1.98
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[16K,64K) -> mpi at=16K us=gloo:110.6,mpi:3.50,native:5.17
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[64K,256K) -> native at=64K us=gloo:115.2,mpi:6.55,native:6.01
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[256K,1M) -> mpi at=256K us=gloo:302.2,mpi:17.3,native:25.4
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[1M,4M) -> native at=1M us=gloo:3969,mpi:163.5,native:163.2
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[4M,inf) -> native at=4M us=gloo:5087,mpi:729.6,native:631.1
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[0,32) -> native at=8 us=gloo:105.5,mpi:0.60,native:0.47
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[32,128) -> native at=32 us=gloo:189.3,mpi:0.55,native:0.52
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[128,512) -> mpi at=128 us=gloo:192.8,mpi:0.66,native:0.70
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[512,2K) -> native at=512 us=gloo:203.9,mpi:1.47,native:0.79
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[2K,8K) -> native at=2K us=gloo:198.5,mpi:3.21,native:1.72
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[8K,32K) -> native at=8K us=gloo:178.8,mpi:8.83,native:2.87
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[32K,128K) -> native at=32K us=gloo:170.9,mpi:16.0,native:7.81
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[128K,512K) -> native at=128K us=gloo:236.3,mpi:31.0,native:10.1
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[512K,2M) -> native at=512K us=gloo:3998,mpi:132.2,native:32.3
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[2M,8M) -> native at=2M us=gloo:4166,mpi:493.7,native:297.5
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[8M,inf) -> native at=8M us=gloo:11283,mpi:2341,native:1112
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[0,32) -> mpi at=8 us=gloo:99.5,mpi:0.26,native:0.42
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[32,128) -> mpi at=32 us=gloo:100.8,mpi:0.24,native:0.44
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[128,512) -> mpi at=128 us=gloo:98.4,mpi:0.27,native:0.50
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[512,2K) -> native at=512 us=gloo:80.0,mpi:1.34,native:0.47
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[2K,8K) -> native at=2K us=gloo:96.1,mpi:2.05,native:0.98
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[8K,32K) -> native at=8K us=gloo:104.5,mpi:1.74,native:1.37
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[32K,128K) -> native at=32K us=gloo:107.3,mpi:4.74,native:4.53
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[128K,512K) -> native at=128K us=gloo:122.3,mpi:5.99,native:4.53
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[512K,2M) -> native at=512K us=gloo:185.7,mpi:19.4,native:11.5
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[2M,8M) -> native at=2M us=gloo:994.5,mpi:169.7,native:60.0
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[8M,inf) -> native at=8M us=gloo:2971,mpi:944.7,native:422.8
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[0,16) -> mpi at=4 us=gloo:111.7,mpi:0.60,native:0.69
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[16,64) -> mpi at=16 us=gloo:181.6,mpi:0.57,native:0.78
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[64,256) -> mpi at=64 us=gloo:187.8,mpi:0.69,native:0.72
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[256,1K) -> mpi at=256 us=gloo:182.4,mpi:0.80,native:0.81
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[1K,4K) -> native at=1K us=gloo:205.1,mpi:1.76,native:1.24
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[4K,16K) -> native at=4K us=gloo:190.8,mpi:6.03,native:2.18
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[16K,64K) -> native at=16K us=gloo:203.6,mpi:10.4,native:5.91
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[64K,256K) -> native at=64K us=gloo:255.8,mpi:24.5,native:6.36
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[256K,1M) -> native at=256K us=gloo:3919,mpi:93.3,native:18.3
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[1M,4M) -> native at=1M us=gloo:4113,mpi:601.5,native:167.8
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[4M,inf) -> native at=4M us=gloo:10879,mpi:2288,native:715.3
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[0,32) -> native at=8 us=gloo:124.0,mpi:1.74,native:1.37
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[32,128) -> native at=32 us=gloo:86.4,mpi:1.70,native:1.33
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[128,512) -> native at=128 us=gloo:101.0,mpi:1.83,native:1.53
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[512,2K) -> native at=512 us=gloo:80.3,mpi:2.43,native:1.42
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[2K,8K) -> native at=2K us=gloo:78.8,mpi:3.26,native:2.14
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[8K,32K) -> native at=8K us=gloo:98.4,mpi:4.08,native:3.61
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[32K,128K) -> mpi at=32K us=gloo:99.4,mpi:5.31,native:7.08
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[128K,512K) -> native at=128K us=gloo:144.4,mpi:8.84,native:7.58
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[512K,2M) -> native at=512K us=gloo:2110,mpi:23.9,native:22.8
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[2M,8M) -> native at=2M us=gloo:2212,mpi:218.2,native:212.1
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=far bytes=[8M,inf) -> native at=8M us=gloo:6609,mpi:992.5,native:921.0
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,16) -> mpi at=4 us=gloo:7282,mpi:145.4,native:239.1
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16,64) -> mpi at=16 us=gloo:5879,mpi:140.8,native:240.4
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64,256) -> mpi at=64 us=gloo:6546,mpi:112.9,native:233.2
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256,1K) -> mpi at=256 us=gloo:6782,mpi:147.9,native:235.8
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1K,4K) -> mpi at=1K us=gloo:6876,mpi:146.3,native:241.6
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[4K,16K) -> mpi at=4K us=gloo:7554,mpi:159.7,native:360.0
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16K,64K) -> mpi at=16K us=gloo:7452,mpi:332.0,native:394.5
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64K,256K) -> native at=64K us=gloo:7762,mpi:914.3,native:891.2
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256K,1M) -> mpi at=256K us=gloo:8951,mpi:3022,native:4997
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1M,inf) -> mpi at=1M us=gloo:21727,mpi:12566,native:19275
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,32) -> native at=8 us=gloo:1052,mpi:147.6,native:102.5
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32,128) -> native at=32 us=gloo:6629,mpi:119.3,native:95.1
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128,512) -> native at=128 us=gloo:11029,mpi:142.6,native:95.1
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512,2K) -> native at=512 us=gloo:10244,mpi:157.3,native:101.1
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2K,8K) -> native at=2K us=gloo:9638,mpi:151.4,native:109.8
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8K,32K) -> native at=8K us=gloo:11274,mpi:250.4,native:124.9
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32K,128K) -> native at=32K us=gloo:11993,mpi:316.1,native:189.6
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128K,512K) -> native at=128K us=gloo:10365,mpi:879.0,native:495.0
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512K,2M) -> native at=512K us=gloo:12198,mpi:1991,native:1419
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2M,8M) -> mpi at=2M us=gloo:17769,mpi:7479,native:7902
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8M,inf) -> native at=8M us=gloo:45240,mpi:40417,native:35279
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,32) -> native at=8 us=gloo:3980,mpi:3.94,native:1.84
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32,128) -> native at=32 us=gloo:5903,mpi:4.06,native:1.94
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128,512) -> native at=128 us=gloo:7739,mpi:22.2,native:5.17
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512,2K) -> native at=512 us=gloo:7953,mpi:22.8,native:2.48
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2K,8K) -> native at=2K us=gloo:4939,mpi:27.9,native:5.79
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8K,32K) -> mpi at=8K us=gloo:7553,mpi:7.86,native:12.0
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32K,128K) -> native at=32K us=gloo:7872,mpi:83.1,native:21.6
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128K,512K) -> native at=128K us=gloo:3930,mpi:285.2,native:69.6
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512K,2M) -> native at=512K us=gloo:4480,mpi:918.1,native:586.2
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2M,8M) -> native at=2M us=gloo:9309,mpi:4799,native:4358
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8M,inf) -> native at=8M us=gloo:23103,mpi:29777,native:15017
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,16) -> mpi at=4 us=gloo:6282,mpi:129.4,native:234.8
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16,64) -> mpi at=16 us=gloo:11191,mpi:168.3,native:233.0
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64,256) -> mpi at=64 us=gloo:9377,mpi:141.7,native:218.2
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256,1K) -> mpi at=256 us=gloo:10720,mpi:172.1,native:246.0
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1K,4K) -> mpi at=1K us=gloo:11445,mpi:163.3,native:249.2
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[4K,16K) -> mpi at=4K us=gloo:11186,mpi:229.6,native:264.3
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16K,64K) -> native at=16K us=gloo:10415,mpi:506.8,native:453.6
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64K,256K) -> native at=64K us=gloo:11815,mpi:1477,native:1230
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256K,1M) -> mpi at=256K us=gloo:18783,mpi:4752,native:6447
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1M,inf) -> native at=1M us=gloo:49207,mpi:30613,native:29121
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,32) -> native at=8 us=gloo:1817,mpi:450.1,native:274.8
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32,128) -> native at=32 us=gloo:1984,mpi:308.1,native:242.3
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128,512) -> mpi at=128 us=gloo:1905,mpi:264.6,native:294.8
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512,2K) -> mpi at=512 us=gloo:2001,mpi:264.9,native:343.5
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2K,8K) -> mpi at=2K us=gloo:1967,mpi:262.8,native:275.7
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8K,32K) -> native at=8K us=gloo:1925,mpi:526.5,native:279.9
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32K,128K) -> mpi at=32K us=gloo:1982,mpi:529.1,native:672.0
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128K,512K) -> mpi at=128K us=gloo:2271,mpi:575.9,native:1260
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512K,2M) -> mpi at=512K us=gloo:3017,mpi:1298,native:2404
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2M,8M) -> mpi at=2M us=gloo:8196,mpi:4911,native:6522
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8M,inf) -> native at=8M us=gloo:30836,mpi:26365,native:18972
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,16) -> mpi at=4 us=gloo:7304,mpi:15.3,native:25.6
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16,64) -> mpi at=16 us=gloo:6328,mpi:15.3,native:25.9
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64,256) -> mpi at=64 us=gloo:7526,mpi:20.0,native:25.9
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256,1K) -> mpi at=256 us=gloo:6984,mpi:25.1,native:27.5
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1K,4K) -> mpi at=1K us=gloo:6348,mpi:30.3,native:34.9
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[4K,16K) -> native at=4K us=gloo:7710,mpi:60.2,native:24.6
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16K,64K) -> native at=16K us=gloo:7432,mpi:144.7,native:49.6
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64K,256K) -> native at=64K us=gloo:7931,mpi:310.9,native:219.5
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256K,1M) -> native at=256K us=gloo:8822,mpi:1203,native:1013
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1M,inf) -> native at=1M us=gloo:21721,mpi:4835,native:4256
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,32) -> native at=8 us=gloo:3654,mpi:15.9,native:11.9
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32,128) -> native at=32 us=gloo:6323,mpi:15.7,native:11.6
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128,512) -> native at=128 us=gloo:11482,mpi:25.7,native:11.8
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512,2K) -> native at=512 us=gloo:10601,mpi:23.8,native:12.1
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2K,8K) -> native at=2K us=gloo:11465,mpi:31.2,native:15.2
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8K,32K) -> native at=8K us=gloo:11451,mpi:46.4,native:22.2
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32K,128K) -> native at=32K us=gloo:11326,mpi:68.9,native:43.2
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128K,512K) -> native at=128K us=gloo:11432,mpi:285.0,native:203.2
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512K,2M) -> native at=512K us=gloo:12080,mpi:1084,native:852.6
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2M,8M) -> native at=2M us=gloo:18898,mpi:3783,native:3334
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8M,inf) -> native at=8M us=gloo:49346,mpi:21139,native:14409
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,32) -> native at=8 us=gloo:3973,mpi:0.55,native:0.51
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32,128) -> mpi at=32 us=gloo:7847,mpi:0.49,native:0.71
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128,512) -> mpi at=128 us=gloo:5482,mpi:0.73,native:0.75
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512,2K) -> native at=512 us=gloo:4189,mpi:8.95,native:0.80
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2K,8K) -> native at=2K us=gloo:7062,mpi:12.7,native:2.18
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8K,32K) -> native at=8K us=gloo:6426,mpi:16.3,native:4.86
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32K,128K) -> native at=32K us=gloo:7831,mpi:30.5,native:26.9
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128K,512K) -> mpi at=128K us=gloo:6836,mpi:36.8,native:59.7
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512K,2M) -> mpi at=512K us=gloo:7067,mpi:203.0,native:220.2
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2M,8M) -> native at=2M us=gloo:9017,mpi:1197,native:937.0
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8M,inf) -> native at=8M us=gloo:20823,mpi:5428,native:3355
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,16) -> mpi at=4 us=gloo:6621,mpi:20.1,native:25.9
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16,64) -> mpi at=16 us=gloo:9967,mpi:24.6,native:28.4
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64,256) -> mpi at=64 us=gloo:10054,mpi:22.4,native:27.8
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256,1K) -> mpi at=256 us=gloo:10778,mpi:28.8,native:29.0
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1K,4K) -> native at=1K us=gloo:11530,mpi:40.3,native:37.4
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[4K,16K) -> native at=4K us=gloo:11119,mpi:67.0,native:63.6
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16K,64K) -> mpi at=16K us=gloo:10368,mpi:120.1,native:136.7
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64K,256K) -> native at=64K us=gloo:10783,mpi:717.8,native:542.4
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256K,1M) -> native at=256K us=gloo:17304,mpi:3036,native:1897
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1M,inf) -> native at=1M us=gloo:51470,mpi:36710,native:8319
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,32) -> native at=8 us=gloo:2287,mpi:82.1,native:63.5
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32,128) -> native at=32 us=gloo:1713,mpi:76.2,native:53.8
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128,512) -> native at=128 us=gloo:1746,mpi:122.5,native:75.6
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512,2K) -> mpi at=512 us=gloo:1780,mpi:51.3,native:62.0
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2K,8K) -> mpi at=2K us=gloo:1225,mpi:71.1,native:115.7
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8K,32K) -> mpi at=8K us=gloo:2049,mpi:83.1,native:152.9
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32K,128K) -> mpi at=32K us=gloo:2212,mpi:109.9,native:490.0
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128K,512K) -> mpi at=128K us=gloo:1914,mpi:176.2,native:179.0
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512K,2M) -> native at=512K us=gloo:2720,mpi:529.5,native:481.7
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2M,8M) -> mpi at=2M us=gloo:8447,mpi:1427,native:1567
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8M,inf) -> native at=8M us=gloo:33005,mpi:15665,native:14335
)";

}  // namespace

std::string_view builtin_table_text() { return kAuto; }

}  // namespace mpcomm::autosel
