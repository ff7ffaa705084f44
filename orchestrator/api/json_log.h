// `rote serve --log-format json`: one JSON object per line, for log collectors.
//   {"time":"2026-01-02T03:04:05.678Z","level":"info","msg":"...","principal":"alice",
//    "run":"runs/7","request_id":"r-1"}
// principal, run and request_id come from the logging thread's engine::LogContext and are left
// out when unknown.
#pragma once

#include <memory>

#include "spdlog/formatter.h"

namespace rote::orchestrator {

std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter();

// Makes every spdlog logger write JSON lines.
void UseJsonLogs();

}  // namespace rote::orchestrator
