// ClientConnection: notices that an HTTP client closed the connection its request came on.
//
// cpp-httplib 0.11 (Debian's) gives a handler no socket and no "connection closed" query, so a
// non-streaming request whose client gave up kept generating until max_tokens or the router's
// timeout (a streaming one notices at its next write). The connection's socket is still open
// while the handler runs (httplib's worker thread is inside it), so it can be found among this
// process's descriptors by its two addresses, which the request carries, and peeked at.
#ifndef OSCARKV_SERVICES_ROUTER_CLIENT_CONNECTION_H_
#define OSCARKV_SERVICES_ROUTER_CLIENT_CONNECTION_H_

#include <optional>
#include <string>

namespace oscarkv::router {

// Both ends of a TCP connection as httplib reports them (numeric host, port).
struct ConnectionEnds {
  std::string local_addr;
  int local_port = -1;
  std::string remote_addr;
  int remote_port = -1;
};

class ClientConnection {
 public:
  // The open TCP socket of this process whose ends are `ends`; nullopt when there is none (the
  // request did not come over TCP, or the caller is not inside the request's handler).
  static std::optional<ClientConnection> Find(const ConnectionEnds& ends);

  // True once the client has closed its end or the connection failed. Never blocks. A client
  // that only shut down its sending side counts as gone (as in uvicorn and most HTTP servers):
  // HTTP/1.1 clients keep that side open while they wait for the response.
  bool Closed() const;

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_;  // owned by httplib, not closed here
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_CLIENT_CONNECTION_H_
