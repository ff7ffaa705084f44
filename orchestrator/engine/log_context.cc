#include "orchestrator/engine/log_context.h"

namespace rote::orchestrator::engine {

LogContext& ThreadLogContext() {
  thread_local LogContext context;
  return context;
}

}  // namespace rote::orchestrator::engine
