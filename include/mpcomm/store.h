// mpcomm/store.h — the rendezvous key-value store ranks use to find each other.
//
// Every call that can block takes a timeout and throws mpcomm::Timeout naming the keys it waited for.
// Values are arbitrary bytes. Keys are strings; PrefixStore namespaces them for sub-communicators and
// for several backends sharing one store.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpcomm/export.h"

namespace mpcomm {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

class MPCOMM_API Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` exists, then returns its value.
  virtual Bytes get(const std::string& key, Millis timeout) = 0;
  // Atomically adds `delta` to the integer stored at key (missing = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True when every key exists; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // Removes a key; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;

  // Convenience for text values.
  void set_string(const std::string& key, const std::string& value);
  std::string get_string(const std::string& key, Millis timeout);

  // The host (a name or an address) of the server this store talks to: what every rank reaches, so the
  // address a rank advertises to the others is the one that routes there. "" for a store without a
  // server (in this process, in a file); a PrefixStore answers for the store under it.
  virtual std::string server_host() const { return ""; }
};

// In-process store for ranks that are threads of one process (tests, benchmarks).
class MPCOMM_API HashStore : public Store {
 public:
  HashStore();
  ~HashStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;

 private:
  struct MPCOMM_HIDDEN State;
  std::unique_ptr<State> s_;
};

// Store in one file on a shared file system; every operation takes an flock on it.
class MPCOMM_API FileStore : public Store {
 public:
  explicit FileStore(std::string path);
  ~FileStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Prepends a prefix to every key of an underlying store.
class MPCOMM_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }
  std::string server_host() const override { return base_->server_host(); }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// How the connections of a TcpStore prove that they belong to the job (docs/reliability.md, "Who gets in").
//   secret  both ends prove knowledge of the job's secret (the token) by challenge and response; the
//           secret never crosses the wire.
//   munge   under Slurm: a client proves its uid and job with a MUNGE credential; the server accepts only
//           its own uid's (root's too with MPCOMM_MUNGE_ROOT=1), for its job, and hands the client the
//           job's secret (made at random by the server when it was given none) in a credential only the
//           client's uid can decode. The server also takes clients that prove the secret.
enum class StoreAuth { secret, munge };

// The server half of TcpStore: a thread that serves the store protocol on host:port.
// Binds to loopback unless told an address; refuses connections that do not prove they belong to the job
// (StoreAuth) and logs each refusal with the peer's address. Lengths read from the wire are bounded.
class MPCOMM_API TcpStoreServer {
 public:
  // port 0 picks a free port; see port(). With StoreAuth::munge, throws PeerFailure when MUNGE is not
  // available here.
  TcpStoreServer(const std::string& host, uint16_t port, std::string token, StoreAuth auth = StoreAuth::secret);
  ~TcpStoreServer();  // stops the thread and closes every socket
  uint16_t port() const;
  const std::string& host() const;
  // Sets a key directly in the served map (used by the launcher to announce a failed rank).
  void set_local(const std::string& key, const Bytes& value);
  // Like set_local, but keeps an existing value; returns whether it set the key.
  bool set_local_if_absent(const std::string& key, const Bytes& value);
  // The value of `key` in the served map, if it is set (never waits).
  bool get_local(const std::string& key, Bytes* value) const;
  size_t refused_connections() const;

 private:
  struct MPCOMM_HIDDEN Impl;
  std::unique_ptr<Impl> impl_;
};

// Client of TcpStoreServer. Connecting retries until `timeout` (the server may start later); the handshake
// then proves both ends belong to the job (StoreAuth), or throws PeerFailure saying why not.
// With `start_server`, this process also starts the server (rank 0 in torchrun-style launches).
class MPCOMM_API TcpStore : public Store {
 public:
  TcpStore(const std::string& host, uint16_t port, std::string token, Millis timeout, bool start_server = false,
           StoreAuth auth = StoreAuth::secret);
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  uint16_t port() const;
  // The server's host as given (a name or an address).
  const std::string& host() const;
  std::string server_host() const override { return host(); }
  // The job's secret: `token`, or with StoreAuth::munge the one the server handed out.
  const std::string& secret() const;

 private:
  struct MPCOMM_HIDDEN Impl;
  std::unique_ptr<Impl> impl_;
};

// The store at the bottom of a chain of PrefixStores: where job-wide keys (mpcomm/abort) live.
MPCOMM_API std::shared_ptr<Store> root_store(std::shared_ptr<Store> s);

// Parses "tcp://host:port" or "file:///path" and connects (TcpStore) or opens (FileStore).
MPCOMM_API std::shared_ptr<Store> open_store(const std::string& url, const std::string& token,
                                              Millis timeout);

}  // namespace mpcomm
