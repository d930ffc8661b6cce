// Matching a call against a selection table's rows (selection_table.h).
#include "tuning/selection_table.h"

#include <algorithm>

namespace mpcomm::tuning {

DtypeClass dtype_class(DataType dt) {
  switch (dt) {
    case DataType::float16:
    case DataType::bfloat16: return DtypeClass::half;
    case DataType::float32:
    case DataType::float64: return DtypeClass::floating;
    default: return DtypeClass::integer;
  }
}

std::string_view to_string(DtypeClass c) {
  switch (c) {
    case DtypeClass::integer: return "int";
    case DtypeClass::floating: return "float";
    case DtypeClass::half: return "half";
  }
  return "?";
}

std::string_view to_string(Placement p) {
  switch (p) {
    case Placement::near: return "near";
    case Placement::far: return "far";
    case Placement::unknown: return "unknown";
  }
  return "?";
}

Call make_call(OpKind op, DataType dt, size_t count, int ranks) {
  Call c;
  c.op = op;
  c.dtype = dtype_class(dt);
  c.bytes = static_cast<double>(count) * static_cast<double>(dtype_size(dt));
  const bool blocks = op == OpKind::allgather || op == OpKind::reduce_scatter || op == OpKind::gather ||
                      op == OpKind::scatter || op == OpKind::alltoall || op == OpKind::allgatherv;
  c.total = blocks ? c.bytes * ranks : c.bytes;
  c.flat_bytes = c.bytes * std::max(ranks - 1, 1);
  return c;
}

static bool want(Want w, bool v) { return w == Want::any || (w == Want::yes) == v; }
static bool want(Placement w, Placement v) { return w == Placement::unknown || w == v; }

bool Row::matches(const Shape& s) const {
  return ranks.contains(s.ranks) && hosts.contains(s.hosts) && per_host.contains(s.per_host) &&
         cpus_per_rank.contains(s.cpus_per_rank) && want(even_hosts, s.even_hosts) &&
         want(single_copy, s.single_copy) && want(placement, s.placement);
}

bool Row::matches(const Call& c) const {
  return (dtypes == 0 || (dtypes >> static_cast<int>(c.dtype) & 1) != 0) && bytes.contains(c.bytes) &&
         total.contains(c.total) && flat_bytes.contains(c.flat_bytes);
}

bool Row::matches(const CallFacts& f) const { return want(in_place, f.in_place) && want(placement_now, f.placement); }

ShapeRows::ShapeRows(const std::vector<const Table*>& tables, const Shape& shape, size_t subjects) : rows_(subjects) {
  for (const Table* t : tables)
    for (const Row& r : t->rows)
      if (r.matches(shape)) rows_.at(static_cast<size_t>(r.subject)).push_back({&r, t});
}

}  // namespace mpcomm::tuning
