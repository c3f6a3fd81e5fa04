#include "services/router/client_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace oscarkv::router {
namespace {

// Whether a socket address is `host`:`port`, the host numeric as httplib writes it
// (getnameinfo with NI_NUMERICHOST). The port is compared first: it rules out almost every
// other socket without the name lookup.
bool IsAddress(const sockaddr_storage& addr, socklen_t len, const std::string& host, int port) {
  int p = -1;
  if (addr.ss_family == AF_INET) {
    p = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  } else if (addr.ss_family == AF_INET6) {
    p = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  }
  if (p != port) return false;
  char buf[NI_MAXHOST];
  return getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof(buf), nullptr, 0,
                     NI_NUMERICHOST) == 0 &&
         host == buf;
}

bool HasEnds(int fd, const ConnectionEnds& ends) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      !IsAddress(addr, len, ends.remote_addr, ends.remote_port)) {
    return false;
  }
  len = sizeof(addr);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
         IsAddress(addr, len, ends.local_addr, ends.local_port);
}

}  // namespace

std::optional<ClientConnection> ClientConnection::Find(const ConnectionEnds& ends) {
  if (ends.remote_port <= 0 || ends.local_port <= 0) return std::nullopt;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  std::optional<ClientConnection> found;
  const int dir_fd = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    if (HasEnds(static_cast<int>(fd), ends)) {
      found = ClientConnection(static_cast<int>(fd));
      break;
    }
  }
  closedir(dir);
  return found;
}

bool ClientConnection::Closed() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return true;
  if ((p.revents & POLLRDHUP) == 0) return false;  // only readable: a pipelined next request
  // The peer's end is shut; bytes it sent before (a pipelined request) still count as alive.
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace oscarkv::router
