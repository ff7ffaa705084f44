#include "orchestrator/api/json_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>

#include "orchestrator/engine/log_context.h"
#include "spdlog/spdlog.h"

namespace rote::orchestrator {
namespace {

void Append(std::string_view s, spdlog::memory_buf_t& out) { out.append(s.data(), s.data() + s.size()); }

// A JSON string literal; control characters escaped, bytes >= 0x80 passed through (log text is
// UTF-8 or, where it quotes client bytes, already escaped by the caller).
void AppendJsonString(std::string_view s, spdlog::memory_buf_t& out) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': Append("\\\"", out); break;
      case '\\': Append("\\\\", out); break;
      case '\n': Append("\\n", out); break;
      case '\r': Append("\\r", out); break;
      case '\t': Append("\\t", out); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          Append(buf, out);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void AppendField(std::string_view name, std::string_view value, spdlog::memory_buf_t& out) {
  out.push_back(',');
  AppendJsonString(name, out);
  out.push_back(':');
  AppendJsonString(value, out);
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const std::time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const int millis = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count() % 1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char time[64];
    std::snprintf(time, sizeof time, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                  utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
    dest.push_back('{');
    AppendJsonString("time", dest);
    dest.push_back(':');
    AppendJsonString(time, dest);
    const auto level = spdlog::level::to_string_view(msg.level);
    AppendField("level", std::string_view(level.data(), level.size()), dest);
    AppendField("msg", std::string_view(msg.payload.data(), msg.payload.size()), dest);
    const engine::LogContext& context = engine::ThreadLogContext();
    if (!context.principal.empty()) AppendField("principal", context.principal, dest);
    if (!context.run.empty()) AppendField("run", context.run, dest);
    if (!context.request_id.empty()) AppendField("request_id", context.request_id, dest);
    Append("}\n", dest);
  }

  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter() { return std::make_unique<JsonFormatter>(); }

void UseJsonLogs() { spdlog::set_formatter(MakeJsonLogFormatter()); }

}  // namespace rote::orchestrator
