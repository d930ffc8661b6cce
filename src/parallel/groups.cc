#include "parallel/groups.h"

#include "mpcomm/error.h"

namespace mpcomm::parallel {

Coords coords_of(int rank, const ParallelDims& d) {
  Coords c;
  c.tp = rank % d.tp;
  c.dp = (rank / d.tp) % d.dp;
  c.pp = rank / (d.tp * d.dp);
  return c;
}

int rank_of(const Coords& c, const ParallelDims& d) { return c.tp + d.tp * (c.dp + d.dp * c.pp); }

ParallelGroups ParallelGroups::create(Communicator& world, const ParallelDims& dims) {
  if (dims.tp < 1 || dims.pp < 1 || dims.dp < 1 || dims.world() != world.size())
    throw InvalidArgument("parallel groups: tp " + std::to_string(dims.tp) + " × pp " + std::to_string(dims.pp) +
                          " × dp " + std::to_string(dims.dp) + " = " + std::to_string(dims.world()) +
                          " does not match the " + std::to_string(world.size()) + " ranks of the world");
  ParallelGroups g;
  g.dims = dims;
  g.me = coords_of(world.rank(), dims);
  g.world = &world;
  // Each split's color names the coordinates the group shares; the key orders it by its own coordinate.
  g.tp = world.split(g.me.dp + dims.dp * g.me.pp, g.me.tp);
  g.pp = world.split(g.me.tp + dims.tp * g.me.dp, g.me.pp);
  g.dp = world.split(g.me.tp + dims.tp * g.me.pp, g.me.dp);
  if (dims.ep > 1) {
    if (dims.dp % dims.ep != 0)
      throw InvalidArgument("parallel groups: expert parallelism " + std::to_string(dims.ep) +
                            " does not divide data parallelism " + std::to_string(dims.dp));
    const int blocks = dims.dp / dims.ep, block = g.me.dp / dims.ep, slot = g.me.dp % dims.ep;
    g.ep = world.split(g.me.tp + dims.tp * (block + blocks * g.me.pp), slot);
    g.edp = world.split(g.me.tp + dims.tp * (slot + dims.ep * g.me.pp), block);
  }
  return g;
}

}  // namespace mpcomm::parallel
