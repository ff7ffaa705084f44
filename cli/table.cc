#include "cli/table.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace rote::cli {

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(headers_.size(), 0);
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < headers_.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      s += cell;
      if (c + 1 < headers_.size()) s += std::string(width[c] - cell.size() + 2, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(headers_);
  for (const auto& row : rows_) line(row);
}

std::string UtcMillisText(int64_t seconds, int32_t nanos) {
  if (seconds == 0 && nanos == 0) return "-";
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(nanos / 1000000));
  return buf;
}

void PrintFields(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& fields) {
  size_t w = 0;
  for (const auto& [k, v] : fields) w = std::max(w, k.size());
  for (const auto& [k, v] : fields) out << k << ":" << std::string(w - k.size() + 1, ' ') << v << "\n";
}

}  // namespace rote::cli
