#include "core/backend.h"

#include "core/device_staging.h"

namespace mpcomm::detail {

Backend::Backend(std::string name, int rank, int size, Topology topo, Options opts, std::shared_ptr<Store> store)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      topology_(std::move(topo)),
      options_(std::move(opts)),
      store_(std::move(store)) {}

Backend::~Backend() = default;

std::string ErrorSubject::str() const { return op_ != nullptr ? b_->describe(*op_) : text_; }

std::unique_ptr<Backend> Backend::split(const SplitPlan& plan) {
  if (plan.color < 0) return nullptr;
  if (plan.recreate == nullptr || plan.store == nullptr)
    throw Internal("mpcomm: split on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " [" + name_ +
                   "]: this backend cannot make a new group (no store or factory)");
  return plan.recreate(plan.store, plan.new_rank, static_cast<int>(plan.members.size()), options_);
}

MemoryType Backend::memory_type(const void*) const {
  return options_.device.kind == Device::cuda || options_.staging > 0 ? MemoryType::device : MemoryType::host;
}

bool Backend::may_stage() const { return options_.device.kind == Device::cuda || options_.staging > 0; }

StagingMemory& Backend::staging() {
  if (!host_staging_) host_staging_ = host_staging();
  return *host_staging_;
}

}  // namespace mpcomm::detail
