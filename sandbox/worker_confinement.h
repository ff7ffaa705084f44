// What confines a rote-sandbox-worker process after start-up (used by sandbox/worker/main.cc;
// separate so tests can check the filter itself).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace rote::sandbox {

// Sets RLIMIT_AS, RLIMIT_CPU, and zero core dumps, file size, new files and processes.
absl::Status ApplyWorkerRlimits(uint64_t address_space_bytes, uint64_t cpu_seconds);

// Installs the seccomp allow-list; any other system call kills the process (SIGSYS):
// read on fd 0, write on fds 1 and 2, brk, mmap without PROT_EXEC, munmap, mremap, futex,
// clock_gettime, rt_sigreturn, exit_group. Irreversible for the calling process.
absl::Status InstallWorkerSeccompFilter();

}  // namespace rote::sandbox
