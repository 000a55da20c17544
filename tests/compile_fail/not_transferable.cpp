// SPDX-License-Identifier: MIT
// A type that is neither trivially copyable nor serializable cannot be sent, and says why.
#include <string>

#include "commx/communicator.hpp"
#include "commx/transport/inproc.hpp"

struct opaque {
  std::string secret;  // not trivially copyable, and no serialize()
#ifdef COMMX_COMPILE_FAIL_CONTROL
  template <class Archive>
  void serialize(Archive& archive) {
    archive(secret);
  }
#endif
};

int main() {
  // Only the trait is instantiated: the check needs no running job.
  return commx::transfer_mode_of<opaque> == commx::transfer_mode::serialized ? 0 : 1;
}
