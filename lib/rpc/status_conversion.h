// The only place where grpc::Status and absl::Status meet (STYLE habit 8). The numeric codes of
// both are the canonical Google codes, so conversion keeps the code and the message.
#ifndef OSCARKV_LIB_RPC_STATUS_CONVERSION_H_
#define OSCARKV_LIB_RPC_STATUS_CONVERSION_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace oscarkv::rpc {

// grpc::Status → absl::Status, same code and message. OK maps to OkStatus().
inline absl::Status ToAbslStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// absl::Status → grpc::Status, same code and message. Codes absl has and gRPC lacks cannot
// occur (both are the canonical set); anything out of range becomes UNKNOWN.
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code = (code > 0 && code <= grpc::StatusCode::UNAUTHENTICATED)
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_STATUS_CONVERSION_H_
