// libmunge through dlopen: the prototypes come from munge.h (libmunge-dev) when the build found it, and the
// library from libmunge.so.2 at run time, so that only MUNGE mode needs MUNGE installed.
#include "net/munge.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include "mpcomm/error.h"

#ifdef MPCOMM_HAVE_MUNGE_H
#include <munge.h>
#endif

namespace mpcomm::net::munge {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// socket=PATH inside "AuthInfo=socket=PATH,ttl=..." of a slurm.conf; "" when not there.
std::string slurm_conf_socket() {
  const char* conf = std::getenv("SLURM_CONF");
  std::ifstream in(conf != nullptr && *conf != '\0' ? conf : "/etc/slurm/slurm.conf");
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line.substr(0, line.find('#')));
    if (strncasecmp(line.c_str(), "AuthInfo", 8) != 0) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || trim(line.substr(8, eq - 8)) != "") continue;
    std::string opts = line.substr(eq + 1);
    for (size_t i = 0; i < opts.size();) {
      size_t j = opts.find(',', i);
      if (j == std::string::npos) j = opts.size();
      std::string item = trim(opts.substr(i, j - i));
      if (item.rfind("socket=", 0) == 0) return item.substr(7);
      i = j + 1;
    }
  }
  return "";
}

std::string where() {
  std::string s = socket_path();
  return "munged (socket " + (s.empty() ? std::string("libmunge's default") : s) + ")";
}

#ifdef MPCOMM_HAVE_MUNGE_H
struct Lib {
  decltype(&::munge_encode) encode = nullptr;
  decltype(&::munge_decode) decode = nullptr;
  decltype(&::munge_ctx_create) ctx_create = nullptr;
  decltype(&::munge_ctx_destroy) ctx_destroy = nullptr;
  decltype(&::munge_ctx_set) ctx_set = nullptr;
  decltype(&::munge_strerror) strerror = nullptr;
  std::string missing;  // why it could not be loaded
};

const Lib& lib() {
  static Lib l = [] {
    Lib x;
    void* h = ::dlopen("libmunge.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = ::dlerror();
      x.missing = std::string("libmunge.so.2 cannot be loaded (Debian: apt-get install libmunge2): ") + (e ? e : "");
      return x;
    }
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(::dlsym(h, name));
      if (f == nullptr && x.missing.empty()) x.missing = std::string("libmunge.so.2 lacks ") + name;
    };
    sym(x.encode, "munge_encode");
    sym(x.decode, "munge_decode");
    sym(x.ctx_create, "munge_ctx_create");
    sym(x.ctx_destroy, "munge_ctx_destroy");
    sym(x.ctx_set, "munge_ctx_set");
    sym(x.strerror, "munge_strerror");
    return x;
  }();
  return l;
}

// A context that talks to socket_path(); destroyed with the object.
struct Ctx {
  munge_ctx_t ctx = nullptr;
  Ctx() {
    const Lib& l = lib();
    if (!l.missing.empty()) throw PeerFailure("mpcomm: MUNGE is not available: " + l.missing);
    ctx = l.ctx_create();
    if (ctx == nullptr) throw Internal("mpcomm: munge_ctx_create() failed (out of memory?)");
    std::string s = socket_path();
    if (!s.empty() && l.ctx_set(ctx, MUNGE_OPT_SOCKET, s.c_str()) != EMUNGE_SUCCESS)
      throw PeerFailure("mpcomm: MUNGE: cannot use the socket " + s);
  }
  ~Ctx() { lib().ctx_destroy(ctx); }
};
#endif

}  // namespace

std::string socket_path() {
  const char* s = std::getenv("MPCOMM_MUNGE_SOCKET");
  if (s != nullptr && *s != '\0') return s;
  return slurm_conf_socket();
}

std::string slurm_job() {
  const char* j = std::getenv("SLURM_JOB_ID");
  if (j == nullptr || *j == '\0') j = std::getenv("SLURM_JOBID");
  return j != nullptr && *j != '\0' ? std::string("slurm/") + j : std::string();
}

#ifdef MPCOMM_HAVE_MUNGE_H

std::string encode(const std::vector<uint8_t>& payload, std::optional<uid_t> only_uid) {
  Ctx c;
  const Lib& l = lib();
  if (only_uid && l.ctx_set(c.ctx, MUNGE_OPT_UID_RESTRICTION, *only_uid) != EMUNGE_SUCCESS)
    throw Internal("mpcomm: MUNGE: cannot restrict a credential to uid " + std::to_string(*only_uid));
  char* cred = nullptr;
  munge_err_t e = l.encode(&cred, c.ctx, payload.data(), static_cast<int>(payload.size()));
  if (e != EMUNGE_SUCCESS) {
    std::free(cred);
    throw PeerFailure("mpcomm: MUNGE credential from " + where() + " failed: " + l.strerror(e));
  }
  std::string out(cred);
  std::free(cred);
  return out;
}

std::string decode(const std::string& cred, Decoded* out) {
  Ctx c;
  const Lib& l = lib();
  void* buf = nullptr;
  int len = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  munge_err_t e = l.decode(cred.c_str(), c.ctx, &buf, &len, &uid, &gid);
  if (e == EMUNGE_SUCCESS && out != nullptr) {
    out->payload.assign(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + std::max(len, 0));
    out->uid = uid;
    out->gid = gid;
  }
  std::free(buf);
  if (e == EMUNGE_SOCKET) throw PeerFailure("mpcomm: MUNGE: cannot reach " + where() + ": " + l.strerror(e));
  return e == EMUNGE_SUCCESS ? std::string() : std::string(l.strerror(e));
}

bool available(std::string* why) {
  try {
    (void)encode({}, std::nullopt);
    return true;
  } catch (const Error& e) {
    std::string w = e.what();
    if (w.rfind("mpcomm: ", 0) == 0) w.erase(0, 8);
    if (why != nullptr) *why = w;
    return false;
  }
}

#else  // built without munge.h

static const char* kNotBuilt = "MUNGE is not available: this mpcomm was built without munge.h (libmunge-dev)";
std::string encode(const std::vector<uint8_t>&, std::optional<uid_t>) {
  throw PeerFailure(std::string("mpcomm: ") + kNotBuilt);
}
std::string decode(const std::string&, Decoded*) { throw PeerFailure(std::string("mpcomm: ") + kNotBuilt); }
bool available(std::string* why) {
  if (why != nullptr) *why = kNotBuilt;
  return false;
}

#endif

}  // namespace mpcomm::net::munge
