// The worker's seccomp filter, checked directly: a child process installs it and tries one
// forbidden thing; the kernel must kill it with SIGSYS. Allowed calls keep working.
#include "sandbox/worker_confinement.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>

namespace rote::sandbox {
namespace {

// Runs `attempt` in a forked child under the filter; returns the child's wait status. The
// child uses raw syscalls only after the filter is in (no allocation, no stdio).
int RunConfined(void (*attempt)()) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!InstallWorkerSeccompFilter().ok()) _exit(90);
    attempt();
    syscall(SYS_exit_group, 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

bool KilledBySigsys(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS; }

TEST(WorkerConfinementTest, FileSystemNetworkProcessesAndExecAreKilled) {
  EXPECT_TRUE(KilledBySigsys(RunConfined([] { syscall(SYS_openat, AT_FDCWD, "/etc/passwd", O_RDONLY); })));
  EXPECT_TRUE(KilledBySigsys(RunConfined([] { syscall(SYS_socket, AF_INET, SOCK_STREAM, 0); })));
  EXPECT_TRUE(KilledBySigsys(RunConfined([] { syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0); })));
  EXPECT_TRUE(KilledBySigsys(RunConfined([] {
    const char* argv[] = {"/bin/true", nullptr};
    syscall(SYS_execve, "/bin/true", argv, nullptr);
  })));
  EXPECT_TRUE(KilledBySigsys(RunConfined([] { syscall(SYS_getpid); })));
  // Writing anywhere but stdout/stderr, reading anything but stdin.
  EXPECT_TRUE(KilledBySigsys(RunConfined([] { syscall(SYS_write, 5, "x", 1); })));
  EXPECT_TRUE(KilledBySigsys(RunConfined([] {
    char c;
    syscall(SYS_read, 3, &c, 1);
  })));
  // No executable memory.
  EXPECT_TRUE(KilledBySigsys(RunConfined([] {
    syscall(SYS_mmap, nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  })));
}

TEST(WorkerConfinementTest, WhatTheWorkerNeedsStillWorks) {
  int status = RunConfined([] {
    void* p = reinterpret_cast<void*>(
        syscall(SYS_mmap, nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) syscall(SYS_exit_group, 3);
    static_cast<char*>(p)[12345] = 1;
    syscall(SYS_munmap, p, 1 << 20);
    syscall(SYS_write, 2, "", 0);
    syscall(SYS_exit_group, 0);
  });
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace rote::sandbox
