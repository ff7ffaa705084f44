// Column-aligned plain-text tables for people; scripts use --json.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace rote::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// A time for people: UTC with milliseconds, always the same width ("2026-11-29T02:50:38.000Z"),
// so table columns do not move when a time falls on a whole second; "-" for the epoch (unset).
// rote keeps times to the millisecond; --json has the protobuf form.
std::string UtcMillisText(int64_t seconds, int32_t nanos);

// "key: value" lines with aligned values.
void PrintFields(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& fields);

}  // namespace rote::cli
