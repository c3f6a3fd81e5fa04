// RAII for ucp_context_h: the UCX library instance with its transport configuration.
#ifndef OSCARKV_LIB_TRANSFER_UCX_UCX_CONTEXT_H_
#define OSCARKV_LIB_TRANSFER_UCX_UCX_CONTEXT_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace oscarkv::transfer::ucx {

class UcxContext {
 public:
  // `config_overrides` are UCX settings without the UCX_ prefix ({"TLS", "tcp,self,sm"}), applied
  // with ucp_config_modify: the only way settings reach UCX (no environment variables).
  // @return kInvalidArgument for an unknown setting, kInternal when UCX cannot start.
  static absl::StatusOr<std::unique_ptr<UcxContext>> Create(
      const std::vector<std::pair<std::string, std::string>>& config_overrides);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return context_; }
  // Whether this UCX build and its loaded transports can move CUDA device memory (a CUDA-enabled
  // UCX such as PyPI's libucx-cu13 with the cuda transports in UCX_TLS); Debian's UCX cannot.
  bool supports_cuda_memory() const;

 private:
  explicit UcxContext(ucp_context_h context) : context_(context) {}
  ucp_context_h context_;
};

}  // namespace oscarkv::transfer::ucx

#endif  // OSCARKV_LIB_TRANSFER_UCX_UCX_CONTEXT_H_
