#include "lib/transfer/ucx/ucx_context.h"

#include "lib/transfer/ucx/ucx_status.h"

namespace oscarkv::transfer::ucx {

absl::StatusOr<std::unique_ptr<UcxContext>> UcxContext::Create(
    const std::vector<std::pair<std::string, std::string>>& config_overrides) {
  ucp_config_t* config = nullptr;
  absl::Status status = UcsToStatus(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  if (!status.ok()) return status;
  for (const auto& [name, value] : config_overrides) {
    status = UcsToStatus(ucp_config_modify(config, name.c_str(), value.c_str()),
                         absl::StrCat("ucp_config_modify(", name, "=", value, ")"));
    if (!status.ok()) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(status.message());
    }
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA;
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  status = UcsToStatus(ucp_init(&params, config, &context), "ucp_init");
  ucp_config_release(config);
  if (!status.ok()) return status;
  return std::unique_ptr<UcxContext>(new UcxContext(context));
}

bool UcxContext::supports_cuda_memory() const {
  ucp_context_attr_t attr = {};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

UcxContext::~UcxContext() { ucp_cleanup(context_); }

}  // namespace oscarkv::transfer::ucx
