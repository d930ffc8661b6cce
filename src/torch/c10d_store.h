// The c10d store PyTorch hands a process-group backend, seen as an mpcomm::Store: the communicator under
// the "mpcomm" process group meets its peers through it (no second port).
#pragma once

#include <mutex>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "mpcomm/store.h"

namespace mpcomm::torch_backend {

// c10d calls are serialized here (mpcomm's abort watch polls the store from its own thread) and their failures
// become mpcomm errors naming the keys.
class C10dStore final : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex mu_;
};

}  // namespace mpcomm::torch_backend
