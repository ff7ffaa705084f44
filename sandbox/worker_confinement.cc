#include "sandbox/worker_confinement.h"

#include <seccomp.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rote::sandbox {

namespace {

// What libseccomp's SCMP_A<n> macros build, as C++: they expand to C compound literals, which
// -Wpedantic (clang) refuses.
scmp_arg_cmp Arg(unsigned int arg, scmp_compare op, scmp_datum_t a, scmp_datum_t b = 0) {
  return scmp_arg_cmp{arg, op, a, b};
}

}  // namespace

absl::Status ApplyWorkerRlimits(uint64_t address_space_bytes, uint64_t cpu_seconds) {
  struct Limit {
    int resource;
    const char* name;
    rlim_t value;
  };
  const Limit limits[] = {{RLIMIT_AS, "RLIMIT_AS", address_space_bytes},
                          {RLIMIT_CPU, "RLIMIT_CPU", cpu_seconds},
                          {RLIMIT_CORE, "RLIMIT_CORE", 0},
                          {RLIMIT_FSIZE, "RLIMIT_FSIZE", 0},
                          {RLIMIT_NOFILE, "RLIMIT_NOFILE", 3},
                          {RLIMIT_NPROC, "RLIMIT_NPROC", 0}};
  for (const Limit& l : limits) {
    struct rlimit rl{l.value, l.value};
    if (setrlimit(l.resource, &rl) != 0) {
      return absl::InternalError(absl::StrCat("setrlimit(", l.name, "): ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status InstallWorkerSeccompFilter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  int rc = 0;
  auto rule = [&](int nr, unsigned count, scmp_arg_cmp arg = {}) {
    if (rc == 0) rc = count == 0 ? seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) : seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, arg);
  };
  // I/O only on the request socket (0 in, 1 out) and stderr (/dev/null under the pool).
  rule(SCMP_SYS(read), 1, Arg(0, SCMP_CMP_EQ, 0));
  rule(SCMP_SYS(write), 1, Arg(0, SCMP_CMP_EQ, 1));
  rule(SCMP_SYS(write), 1, Arg(0, SCMP_CMP_EQ, 2));
  // Memory for malloc and the Lua arena; never executable mappings.
  rule(SCMP_SYS(brk), 0);
  rule(SCMP_SYS(mmap), 1, Arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
  rule(SCMP_SYS(munmap), 0);
  rule(SCMP_SYS(mremap), 0);
  rule(SCMP_SYS(futex), 0);
  rule(SCMP_SYS(clock_gettime), 0);
  rule(SCMP_SYS(rt_sigreturn), 0);
  rule(SCMP_SYS(exit_group), 0);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) return absl::InternalError(absl::StrCat("installing the seccomp filter: ", strerror(-rc)));
  return absl::OkStatus();
}

}  // namespace rote::sandbox
