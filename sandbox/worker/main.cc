// rote-sandbox-worker: executes function artifacts for WorkerPool, one batch per request,
// on the socket it gets as stdin/stdout. After start-up it can do nothing but read and write
// that socket and manage its own memory: a seccomp filter kills it on any other system call.
//
//   rote-sandbox-worker [--address-space BYTES] [--cpu-seconds N]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sandbox/lua_runtime.h"
#include "sandbox/worker_confinement.h"
#include "sandbox/worker_protocol.h"

namespace {

namespace proto = rote::sandbox::protocol;

void Die(const char* what) {
  // stderr is /dev/null under the pool; the exit code tells the parent.
  (void)!write(2, what, strlen(what));
  _exit(70);
}

bool ReadFull(int fd, char* buf, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, buf, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    buf += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteFull(int fd, const char* buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    buf += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool WriteFrame(const std::string& payload) {
  char header[8];
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(static_cast<uint64_t>(payload.size()) >> (8 * i));
  return WriteFull(1, header, sizeof header) && WriteFull(1, payload.data(), payload.size());
}

}  // namespace

int main(int argc, char** argv) {
  rlim_t address_space = 2ull << 30;
  rlim_t cpu_seconds = 600;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--address-space") address_space = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--cpu-seconds") cpu_seconds = std::strtoull(argv[i + 1], nullptr, 10);
    else Die("unknown flag\n");
  }
  // Die with the server, never outlive it; no core dumps, no ptrace by others.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(0);
  prctl(PR_SET_DUMPABLE, 0);
  // Whatever the parent leaked without O_CLOEXEC: only 0, 1, 2 stay open.
  syscall(SYS_close_range, 3u, ~0u, 0u);

  if (!rote::sandbox::ApplyWorkerRlimits(address_space, cpu_seconds).ok()) Die("setrlimit failed\n");

  // Warm up before the filter: the C locale object, the allocator, the Lua library pages.
  {
    auto warm = rote::sandbox::RunFunctionArtifact("return function(x) return x end", "warmup.lua",
                                                   {rote::sandbox::Value::Int(1)}, {});
    if (!warm.ok() || !(*warm)[0].status.ok()) Die("warm-up failed\n");
  }
  if (!rote::sandbox::InstallWorkerSeccompFilter().ok()) Die("seccomp failed\n");

  rote::sandbox::ArtifactCache cache;  // the last artifact stays compiled between requests

  while (true) {
    char header[8];
    if (!ReadFull(0, header, sizeof header)) _exit(0);  // parent closed the socket
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(header[i])) << (8 * i);
    if (len > proto::kMaxMessageBytes) Die("request too large\n");
    std::string payload(len, '\0');
    if (!ReadFull(0, payload.data(), len)) _exit(0);
    auto request = proto::DecodeRequestLazily(payload);
    std::string frame;
    if (!request.ok()) {
      proto::BeginResponse(frame, false, request.status(), 0);
      if (!WriteFrame(frame)) _exit(0);
      continue;
    }
    // Results go out in frames of kResultsPerFrame while later inputs are still running.
    std::string results;
    size_t in_frame = 0;
    absl::Status batch = rote::sandbox::RunFunctionArtifactEncoded(
        request->source, request->chunkname, request->inputs, request->limits,
        [&](size_t, const absl::Status& status, std::string_view value, std::string_view output,
            const rote::sandbox::Usage& usage) {
          proto::AppendResult(results, status, value, output, usage);
          if (++in_frame == proto::kResultsPerFrame) {
            frame.clear();
            proto::BeginResponse(frame, true, absl::OkStatus(), in_frame);
            frame.append(results);
            if (!WriteFrame(frame)) _exit(0);
            results.clear();
            in_frame = 0;
          }
        },
        &cache);
    frame.clear();
    if (batch.ok()) {
      proto::BeginResponse(frame, false, batch, in_frame);
      frame.append(results);
    } else {
      proto::BeginResponse(frame, false, batch, 0);
    }
    if (!WriteFrame(frame)) _exit(0);
  }
}
