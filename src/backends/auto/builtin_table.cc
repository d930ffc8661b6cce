// The auto backend's built-in table: which backend runs a call when neither MPCOMM_TUNING nor a table
// stored for this machine has an auto section (route_table.h). Data only: `mpcomm tune --backends all` on
// the machine its header names (2 vCPUs, one Intel Xeon host, Open MPI 4.1, Gloo 0.5), for the shapes of
// `mpcomm compare` (8 ranks on 1 host, 8 ranks on 4 emulated hosts, 2 ranks) and its ops, 8 B to 64 MiB:
//   for s in "--ranks 8" "--ranks 8 --hosts 4" "--ranks 2"; do
//     mpcomm tune --backends all $s -b 8 -e 64M -f 4 -n 10 -w 2 -o builtin.table; done
// Each row: the fastest backend at its size (at=) by median, with every backend's median (us=). A call no
// row matches (another shape, another placement of the first two CPUs) runs on native.
#include "backends/auto/route_table.h"

namespace mpcomm::autosel {

namespace {

constexpr std::string_view kAuto = R"(mpcomm-tuning 1 backend=auto machine=Intel_R_Xeon_R_Processor.c2.g0.h1
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[0,16) -> native at=4 us=gloo:95.6,mpi:0.58,native:0.55
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[16,64) -> native at=16 us=gloo:98.9,mpi:0.57,native:0.56
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[64,256) -> mpi at=64 us=gloo:98.7,mpi:0.67,native:0.69
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[256,1K) -> native at=256 us=gloo:3428,mpi:0.82,native:0.64
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[1K,4K) -> native at=1K us=gloo:104.9,mpi:1.61,native:1.30
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[4K,16K) -> native at=4K us=gloo:112.8,mpi:3.60,native:1.89
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[16K,64K) -> mpi at=16K us=gloo:121.2,mpi:4.34,native:4.76
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[64K,256K) -> native at=64K us=gloo:3452,mpi:7.32,native:6.08
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[256K,1M) -> mpi at=256K us=gloo:3765,mpi:17.9,native:27.8
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[1M,4M) -> mpi at=1M us=gloo:3937,mpi:182.9,native:185.6
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[4M,16M) -> native at=4M us=gloo:4152,mpi:974.2,native:821.5
allgather ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[16M,inf) -> native at=16M us=gloo:17030,mpi:5824,native:3596
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[0,32) -> native at=8 us=gloo:77.1,mpi:0.77,native:0.27
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32,128) -> native at=32 us=gloo:3881,mpi:0.70,native:0.46
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[128,512) -> native at=128 us=gloo:3986,mpi:1.10,native:0.27
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[512,2K) -> native at=512 us=gloo:3969,mpi:1.44,native:0.29
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[2K,8K) -> native at=2K us=gloo:384.5,mpi:2.44,native:1.76
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[8K,32K) -> native at=8K us=gloo:286.0,mpi:8.28,native:2.84
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32K,128K) -> native at=32K us=gloo:3794,mpi:16.0,native:7.68
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[128K,512K) -> native at=128K us=gloo:256.3,mpi:35.4,native:10.1
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[512K,2M) -> native at=512K us=gloo:3243,mpi:97.7,native:36.9
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[2M,8M) -> native at=2M us=gloo:4389,mpi:508.9,native:311.0
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[8M,32M) -> native at=8M us=gloo:10003,mpi:2117,native:1547
allreduce ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32M,inf) -> native at=32M us=gloo:40202,mpi:17375,native:8960
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[0,32) -> mpi at=8 us=gloo:281.6,mpi:0.36,native:0.44
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32,128) -> mpi at=32 us=gloo:75.1,mpi:0.30,native:0.49
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[128,512) -> native at=128 us=gloo:3509,mpi:0.71,native:0.41
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[512,2K) -> native at=512 us=gloo:86.1,mpi:1.06,native:0.61
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[2K,8K) -> native at=2K us=gloo:103.6,mpi:1.49,native:1.25
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[8K,32K) -> native at=8K us=gloo:108.0,mpi:2.32,native:1.36
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32K,128K) -> mpi at=32K us=gloo:109.6,mpi:3.13,native:3.87
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[128K,512K) -> native at=128K us=gloo:129.6,mpi:6.22,native:4.50
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[512K,2M) -> native at=512K us=gloo:148.8,mpi:20.8,native:11.3
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[2M,8M) -> native at=2M us=gloo:3471,mpi:177.8,native:59.7
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[8M,32M) -> native at=8M us=gloo:3295,mpi:954.0,native:409.0
broadcast ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32M,inf) -> native at=32M us=gloo:13220,mpi:5907,native:3095
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[0,16) -> native at=4 us=gloo:89.4,mpi:0.70,native:0.66
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[16,64) -> native at=16 us=gloo:290.3,mpi:0.72,native:0.59
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[64,256) -> native at=64 us=gloo:224.2,mpi:0.96,native:0.62
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[256,1K) -> native at=256 us=gloo:222.9,mpi:0.85,native:0.84
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[1K,4K) -> native at=1K us=gloo:200.0,mpi:1.68,native:1.14
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[4K,16K) -> native at=4K us=gloo:3262,mpi:6.28,native:1.97
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[16K,64K) -> native at=16K us=gloo:4004,mpi:10.6,native:5.59
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[64K,256K) -> native at=64K us=gloo:3970,mpi:23.3,native:6.45
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[256K,1M) -> native at=256K us=gloo:3834,mpi:101.1,native:19.7
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[1M,4M) -> native at=1M us=gloo:4080,mpi:586.2,native:183.4
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[4M,16M) -> native at=4M us=gloo:12387,mpi:3851,native:859.1
reduce_scatter ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[16M,inf) -> native at=16M us=gloo:44769,mpi:32567,native:5796
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[0,32) -> native at=8 us=gloo:95.8,mpi:1.83,native:1.34
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32,128) -> native at=32 us=gloo:99.1,mpi:2.01,native:1.47
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[128,512) -> native at=128 us=gloo:129.6,mpi:2.14,native:1.47
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[512,2K) -> native at=512 us=gloo:142.0,mpi:2.28,native:1.39
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[2K,8K) -> native at=2K us=gloo:77.3,mpi:3.15,native:1.90
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[8K,32K) -> native at=8K us=gloo:157.1,mpi:4.74,native:3.08
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32K,128K) -> mpi at=32K us=gloo:2249,mpi:5.35,native:7.18
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[128K,512K) -> native at=128K us=gloo:145.7,mpi:9.70,native:7.78
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[512K,2M) -> native at=512K us=gloo:1688,mpi:27.5,native:26.5
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[2M,8M) -> mpi at=2M us=gloo:2404,mpi:358.2,native:395.9
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[8M,32M) -> native at=8M us=gloo:8624,mpi:1370,native:1342
sendrecv ranks=2 hosts=1 per_host=2 cpus_per_rank=[1,inf) placement=near bytes=[32M,inf) -> mpi at=32M us=gloo:28208,mpi:7118,native:7969
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,16) -> mpi at=4 us=gloo:7021,mpi:162.6,native:197.0
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16,64) -> mpi at=16 us=gloo:6728,mpi:92.0,native:198.6
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64,256) -> mpi at=64 us=gloo:7418,mpi:128.5,native:209.8
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256,1K) -> mpi at=256 us=gloo:9949,mpi:138.9,native:208.0
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1K,4K) -> mpi at=1K us=gloo:8695,mpi:108.2,native:220.1
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[4K,16K) -> mpi at=4K us=gloo:7410,mpi:167.6,native:258.5
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16K,64K) -> native at=16K us=gloo:8130,mpi:649.2,native:357.6
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64K,256K) -> native at=64K us=gloo:8099,mpi:1220,native:842.0
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256K,1M) -> native at=256K us=gloo:8477,mpi:3704,native:3438
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1M,4M) -> mpi at=1M us=gloo:19869,mpi:16050,native:17653
allgather ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[4M,inf) -> mpi at=4M us=gloo:87180,mpi:66029,native:68344
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,32) -> native at=8 us=gloo:3952,mpi:208.1,native:110.4
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32,128) -> mpi at=32 us=gloo:8256,mpi:120.7,native:139.4
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128,512) -> native at=128 us=gloo:8095,mpi:157.5,native:76.0
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512,2K) -> native at=512 us=gloo:11789,mpi:134.9,native:102.2
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2K,8K) -> native at=2K us=gloo:8688,mpi:182.1,native:100.5
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8K,32K) -> native at=8K us=gloo:11443,mpi:295.6,native:96.4
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32K,128K) -> native at=32K us=gloo:8360,mpi:335.5,native:154.9
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128K,512K) -> native at=128K us=gloo:12754,mpi:759.1,native:449.7
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512K,2M) -> native at=512K us=gloo:7385,mpi:2202,native:1562
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2M,8M) -> mpi at=2M us=gloo:16726,mpi:8055,native:9000
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8M,32M) -> native at=8M us=gloo:55894,mpi:44262,native:42759
allreduce ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32M,inf) -> native at=32M us=gloo:206265,mpi:217106,native:153266
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,32) -> mpi at=8 us=gloo:4040,mpi:4.63,native:10.7
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32,128) -> mpi at=32 us=gloo:4111,mpi:4.40,native:10.9
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128,512) -> native at=128 us=gloo:4046,mpi:21.6,native:7.50
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512,2K) -> native at=512 us=gloo:4027,mpi:23.2,native:7.47
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2K,8K) -> native at=2K us=gloo:3458,mpi:23.0,native:8.46
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8K,32K) -> mpi at=8K us=gloo:3911,mpi:10.0,native:11.5
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32K,128K) -> native at=32K us=gloo:3962,mpi:89.1,native:22.7
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128K,512K) -> native at=128K us=gloo:5350,mpi:373.0,native:77.3
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512K,2M) -> native at=512K us=gloo:7283,mpi:1112,native:506.6
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2M,8M) -> native at=2M us=gloo:6488,mpi:7666,native:5547
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8M,32M) -> native at=8M us=gloo:22314,mpi:27816,native:14128
broadcast ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32M,inf) -> native at=32M us=gloo:72673,mpi:102467,native:48306
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,16) -> mpi at=4 us=gloo:7583,mpi:131.7,native:262.8
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16,64) -> mpi at=16 us=gloo:9515,mpi:119.8,native:229.4
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64,256) -> mpi at=64 us=gloo:9644,mpi:162.2,native:238.3
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256,1K) -> mpi at=256 us=gloo:8245,mpi:150.9,native:249.7
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1K,4K) -> mpi at=1K us=gloo:11817,mpi:197.0,native:245.9
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[4K,16K) -> mpi at=4K us=gloo:11619,mpi:148.9,native:270.5
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[16K,64K) -> native at=16K us=gloo:11969,mpi:910.5,native:471.4
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[64K,256K) -> native at=64K us=gloo:11678,mpi:2082,native:1162
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[256K,1M) -> native at=256K us=gloo:18618,mpi:7669,native:4751
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[1M,4M) -> native at=1M us=gloo:58520,mpi:31431,native:24950
reduce_scatter ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[4M,inf) -> native at=4M us=gloo:200384,mpi:195129,native:104505
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[0,32) -> native at=8 us=gloo:1295,mpi:284.8,native:105.3
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32,128) -> mpi at=32 us=gloo:3067,mpi:235.9,native:349.2
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128,512) -> mpi at=128 us=gloo:802.3,mpi:297.3,native:308.3
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512,2K) -> mpi at=512 us=gloo:1439,mpi:230.2,native:337.7
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2K,8K) -> native at=2K us=gloo:2054,mpi:314.2,native:300.4
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8K,32K) -> mpi at=8K us=gloo:2198,mpi:286.1,native:303.4
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32K,128K) -> native at=32K us=gloo:2131,mpi:557.4,native:380.7
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[128K,512K) -> mpi at=128K us=gloo:2505,mpi:848.4,native:1249
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[512K,2M) -> mpi at=512K us=gloo:3344,mpi:1411,native:2709
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[2M,8M) -> native at=2M us=gloo:7286,mpi:8641,native:6447
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[8M,32M) -> native at=8M us=gloo:26718,mpi:23587,native:18521
sendrecv ranks=8 hosts=4 per_host=2 cpus_per_rank=[1,inf) bytes=[32M,inf) -> native at=32M us=gloo:104132,mpi:87191,native:77539
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,16) -> mpi at=4 us=gloo:8139,mpi:17.5,native:26.5
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16,64) -> mpi at=16 us=gloo:5728,mpi:16.8,native:25.4
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64,256) -> mpi at=64 us=gloo:6933,mpi:18.4,native:28.6
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256,1K) -> mpi at=256 us=gloo:7200,mpi:25.5,native:29.3
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1K,4K) -> native at=1K us=gloo:8535,mpi:36.1,native:35.9
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[4K,16K) -> native at=4K us=gloo:5997,mpi:53.3,native:26.9
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16K,64K) -> native at=16K us=gloo:6886,mpi:74.5,native:47.2
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64K,256K) -> native at=64K us=gloo:6502,mpi:275.2,native:186.9
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256K,1M) -> mpi at=256K us=gloo:9504,mpi:1171,native:1531
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1M,4M) -> native at=1M us=gloo:25395,mpi:10277,native:4055
allgather ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[4M,inf) -> native at=4M us=gloo:87377,mpi:30227,native:19115
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,32) -> native at=8 us=gloo:2726,mpi:76.9,native:30.9
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32,128) -> native at=32 us=gloo:6437,mpi:22.0,native:12.7
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128,512) -> native at=128 us=gloo:10850,mpi:21.1,native:13.6
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512,2K) -> native at=512 us=gloo:11195,mpi:26.8,native:12.7
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2K,8K) -> native at=2K us=gloo:12372,mpi:34.2,native:15.6
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8K,32K) -> native at=8K us=gloo:12081,mpi:43.5,native:22.3
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32K,128K) -> native at=32K us=gloo:11278,mpi:80.4,native:43.5
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128K,512K) -> native at=128K us=gloo:10483,mpi:316.8,native:190.0
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512K,2M) -> native at=512K us=gloo:9133,mpi:872.2,native:853.1
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2M,8M) -> native at=2M us=gloo:15400,mpi:3545,native:3108
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8M,32M) -> native at=8M us=gloo:49861,mpi:19203,native:14333
allreduce ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32M,inf) -> native at=32M us=gloo:186511,mpi:110168,native:54525
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,32) -> native at=8 us=gloo:4117,mpi:0.69,native:0.44
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32,128) -> native at=32 us=gloo:4516,mpi:0.82,native:0.82
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128,512) -> native at=128 us=gloo:5833,mpi:1.72,native:0.88
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512,2K) -> native at=512 us=gloo:4160,mpi:13.6,native:1.08
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2K,8K) -> mpi at=2K us=gloo:3922,mpi:13.7,native:17.3
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8K,32K) -> native at=8K us=gloo:4169,mpi:16.5,native:5.20
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32K,128K) -> native at=32K us=gloo:4188,mpi:39.4,native:20.3
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128K,512K) -> mpi at=128K us=gloo:3814,mpi:38.3,native:54.9
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512K,2M) -> native at=512K us=gloo:7615,mpi:226.1,native:223.9
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2M,8M) -> native at=2M us=gloo:6777,mpi:1033,native:837.2
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8M,32M) -> native at=8M us=gloo:20436,mpi:6148,native:3396
broadcast ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32M,inf) -> native at=32M us=gloo:81335,mpi:27309,native:13408
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,16) -> mpi at=4 us=gloo:6994,mpi:22.1,native:26.9
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16,64) -> mpi at=16 us=gloo:12180,mpi:25.9,native:33.0
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64,256) -> mpi at=64 us=gloo:9864,mpi:27.3,native:30.9
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256,1K) -> mpi at=256 us=gloo:11264,mpi:31.7,native:31.9
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1K,4K) -> native at=1K us=gloo:10947,mpi:42.7,native:39.0
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[4K,16K) -> native at=4K us=gloo:11730,mpi:72.6,native:62.8
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[16K,64K) -> mpi at=16K us=gloo:10568,mpi:124.8,native:285.4
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[64K,256K) -> native at=64K us=gloo:12911,mpi:747.0,native:582.9
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[256K,1M) -> native at=256K us=gloo:21143,mpi:2372,native:2016
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[1M,4M) -> native at=1M us=gloo:62173,mpi:34848,native:9258
reduce_scatter ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[4M,inf) -> native at=4M us=gloo:192567,mpi:144894,native:34232
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[0,32) -> native at=8 us=gloo:2109,mpi:118.3,native:110.0
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32,128) -> mpi at=32 us=gloo:2428,mpi:71.6,native:86.6
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128,512) -> native at=128 us=gloo:1121,mpi:136.7,native:81.8
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512,2K) -> native at=512 us=gloo:1104,mpi:91.7,native:66.8
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2K,8K) -> native at=2K us=gloo:1136,mpi:91.9,native:59.6
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8K,32K) -> mpi at=8K us=gloo:3707,mpi:93.0,native:149.1
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32K,128K) -> mpi at=32K us=gloo:1606,mpi:88.3,native:618.1
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[128K,512K) -> native at=128K us=gloo:2992,mpi:385.0,native:167.0
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[512K,2M) -> mpi at=512K us=gloo:3556,mpi:651.6,native:764.0
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[2M,8M) -> native at=2M us=gloo:9461,mpi:2352,native:1719
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[8M,32M) -> native at=8M us=gloo:29448,mpi:18843,native:14746
sendrecv ranks=8 hosts=1 per_host=8 cpus_per_rank=(0,1) bytes=[32M,inf) -> native at=32M us=gloo:105043,mpi:55556,native:39238
)";

}  // namespace

std::string_view builtin_table_text() { return kAuto; }

}  // namespace mpcomm::autosel
