// What the native engine puts on a link, and a send or receive in flight.
//
// Every message on a Link is a FrameHeader followed by its payload (or, for a frame that goes by single
// copy, a descriptor of the sender's buffer instead of the payload). Collective frames carry the
// sending op's Fingerprint; point-to-point frames carry their tag; acknowledgements end single copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/op.h"

namespace mpcomm::native {

struct FrameHeader {
  uint32_t magic;
  uint8_t kind;  // kFrameCollective, kFrameP2P or kFrameAck
  uint8_t pad[3];  // pad[0]: kFlagSingleCopy
  int32_t tag;     // p2p: the tag; a p2p ack: the token of the read it ends
  uint32_t skip;   // filler bytes between this header and the payload (see Link::write_offset)
  detail::Fingerprint fp;
  uint64_t bytes;
};
static_assert(sizeof(FrameHeader) == 48);
inline constexpr uint32_t kFrameMagic = 0x4d504652;  // "MPFR"
inline constexpr uint8_t kFrameCollective = 1;
inline constexpr uint8_t kFrameP2P = 2;
inline constexpr uint8_t kFrameAck = 3;  // single-copy frame read: the sender may reuse its buffer
inline constexpr uint8_t kFlagSingleCopy = 1;  // the payload is a descriptor: {address, p2p token or pid}
inline constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;

// How a collective frame to a rank of this host may travel: as the table's collective.path rows say
// (usual), or always through the shared-memory ring (ring: algorithms whose point is the ring, such as
// ring_shm and two_copy).
enum class Route : uint8_t { usual, ring };

// One pending send or receive.
struct Xfer {
  int peer = -1;        // a p2p receive from any rank: kAnySource until a frame matches it
  uint64_t posted = 0;  // p2p receive: its place in the order receives were posted (from-any ones match by it)
  bool is_send = false;
  uint8_t kind = kFrameCollective;
  int tag = 0;
  detail::Fingerprint fp;
  const char* sdata = nullptr;
  char* rdata = nullptr;
  size_t bytes = 0;
  size_t done_bytes = 0;  // send: header + payload written; recv: payload read
  FrameHeader hdr{};      // send only
  bool done = false;
  bool single_copy = false;  // send: offered as a descriptor; done when the receiver's ack arrives
  int32_t token = 0;         // single-copy p2p send: what the receiver's ack names it by (1 and up)
  Route route = Route::usual;  // send: whether it may go by single copy
  // A reducing receive (recv_reduce): rdata = own op payload, combined as the bytes arrive instead of
  // copied. `carry` holds the bytes of an element not yet complete (split by the ring's end, or by TCP).
  bool reduce = false;
  const char* own = nullptr;
  // recv_reduce: the result also goes here, with streaming stores (reduce_into_streamed).
  char* stream_to = nullptr;
  bool own_first = true;  // recv_reduce: own op incoming (else incoming op own)
  DataType dtype = DataType::uint8;
  ReduceOp redop = ReduceOp::sum;
  size_t combined = 0;
  char carry[16];
  size_t carry_len = 0;
};
using Handle = std::shared_ptr<Xfer>;

// Who a peer is, as the engine needs to know.
struct PeerInfo {
  int pid = 0;           // process id, when on this host
  bool same_host = false;
  int local = -1;        // index in the shared-memory segment, when on this host
  std::string where;     // for messages, on another host: " on <machine> at <address>"
};

// "allreduce #3 (count 4, float32, sum)" or "send (tag 5, 64 bytes)": what a frame belongs to.
std::string frame_name(const FrameHeader& h);

}  // namespace mpcomm::native
