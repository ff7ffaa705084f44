// Sandbox benchmark; prints one JSON object per line.
//
//   bench_sandbox [--records N] [--repeat R] [--regex-mb M] [--latency-calls K] [--lua PATH] [--grep PATH]
//
// 1. A generated-style Lua function (amount parsing with patterns) applied to N records through
//    the worker pool, against the same function and records in the stock lua5.4 interpreter
//    (a whole `lua5.4` process: start-up, building the records, applying the function), each
//    side R times interleaved, medians compared.
// 2. RE2 find-all over M MB against `grep -oE` with the same pattern, next to a memchr scan of
//    the same buffer (the memory-bandwidth bound for any single pass).
// 3. Latency of single-input worker calls, p50/p99.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "sandbox/lua_runtime.h"
#include "sandbox/regex.h"
#include "sandbox/value.h"
#include "sandbox/worker_pool.h"

namespace {

using rote::sandbox::Value;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The kind of function the model writes for a `bp:lua` generation point.
constexpr const char* kParseAmount = R"LUA(
return function(rec)
  local text = rec.text
  local num, cur = text:match("([%d%.,]+)%s*(%a%a%a)")
  if not num then
    local sym
    sym, num = text:match("([$€£])%s*([%d%.,]+)")
    cur = ({ ["$"] = "USD", ["€"] = "EUR", ["£"] = "GBP" })[sym] or "XXX"
    if not num then return { id = rec.id, ok = false } end
  end
  local last_dot, last_comma = num:find("%.[^%.]*$"), num:find(",[^,]*$")
  if last_comma and (not last_dot or last_comma > last_dot) then
    num = num:gsub("%.", ""):gsub(",", ".")
  else
    num = num:gsub(",", "")
  end
  return { id = rec.id, ok = true, value = tonumber(num), currency = cur }
end
)LUA";

std::string RecordText(int i) {
  switch (i % 4) {
    case 0: return "Invoice total: " + std::to_string(1000 + i) + ",50 EUR incl. VAT";
    case 1: return "Please pay $" + std::to_string(i % 9 + 1) + "," + std::to_string(100 + i % 900) + ".25 by Friday";
    case 2: return "Betrag 1." + std::to_string(100 + i % 900) + ",00 CHF";
    default: return "no amount in record " + std::to_string(i);
  }
}

std::string LuaQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

double RunStockLua(const std::string& lua, int records, std::string* checksum) {
  std::string path = "/tmp/rote_bench_sandbox_stock.lua";
  std::ofstream f(path);
  // The same records, built in Lua (as our side builds them from Values), then the same
  // function applied to each; results are kept like the pool keeps them.
  f << "local f = (function() " << kParseAmount << " end)()\n";
  f << "local texts = {";
  for (int i = 0; i < 4; ++i) f << LuaQuote(RecordText(i)) << ",";
  f << "}\nlocal n = " << records << "\nlocal out = {}\n";
  f << "local function text(i)\n"
       "  local m = i % 4\n"
       "  if m == 0 then return 'Invoice total: ' .. (1000 + i) .. ',50 EUR incl. VAT'\n"
       "  elseif m == 1 then return 'Please pay $' .. (i % 9 + 1) .. ',' .. (100 + i % 900) .. '.25 by Friday'\n"
       "  elseif m == 2 then return 'Betrag 1.' .. (100 + i % 900) .. ',00 CHF'\n"
       "  else return 'no amount in record ' .. i end\nend\n";
  f << "local recs = {}\nfor i = 0, n - 1 do recs[i + 1] = { id = i, text = text(i) } end\n";
  f << "for i = 1, n do out[i] = f(recs[i]) end\n";
  f << "local sum = 0 for i = 1, n do if out[i].ok then sum = sum + out[i].value end end\n";
  f << "io.write(string.format('%.2f', sum))\n";
  f.close();
  auto t0 = Clock::now();
  FILE* p = popen((lua + " " + path).c_str(), "r");
  char buf[128] = {0};
  size_t n = p ? fread(buf, 1, sizeof buf - 1, p) : 0;
  if (p) pclose(p);
  double s = Seconds(t0);
  *checksum = std::string(buf, n);
  return s;
}

void BenchLuaFunction(int records, int repeat, const std::string& lua) {
  std::vector<Value> inputs;
  inputs.reserve(records);
  for (int i = 0; i < records; ++i) {
    rote::sandbox::Map m;
    m["id"] = Value::Int(i);
    m["text"] = Value::String(RecordText(i));
    inputs.push_back(Value::FromMap(std::move(m)));
  }
  rote::sandbox::WorkerPoolOptions o;
  o.num_workers = 1;
  o.default_deadline = std::chrono::seconds(120);
  auto pool = rote::sandbox::WorkerPool::Start(o);
  if (!pool.ok()) {
    std::cerr << pool.status() << "\n";
    return;
  }
  // Warm the worker once (first-call page faults). Then each side runs `repeat` times,
  // interleaved so that machine noise hits both; the ratio is taken of the medians.
  (void)(*pool)->Call(kParseAmount, "parse_amount.lua", {inputs[0]}, {});
  std::vector<double> pool_t, inproc_t, stock_t;
  double sum = 0;
  size_t failed = 0;
  std::string stock_sum;
  absl::StatusOr<std::vector<rote::sandbox::CallResult>> local;
  for (int rep = 0; rep < repeat; ++rep) {
    auto t0 = Clock::now();
    auto out = (*pool)->Call(kParseAmount, "parse_amount.lua", inputs, {});
    pool_t.push_back(Seconds(t0));
    if (!out.ok()) {
      std::cerr << out.status() << "\n";
      return;
    }
    sum = 0;
    failed = 0;
    for (const auto& r : *out) {
      if (!r.status.ok()) {
        ++failed;
        continue;
      }
      const auto& m = r.value.as_map();
      if (m.at("ok").as_bool()) {
        const Value& v = m.at("value");
        sum += v.is_int() ? static_cast<double>(v.as_int()) : v.as_float();
      }
    }
    t0 = Clock::now();
    local = rote::sandbox::RunFunctionArtifact(kParseAmount, "parse_amount.lua", inputs, {});
    inproc_t.push_back(Seconds(t0));
    stock_t.push_back(RunStockLua(lua, records, &stock_sum));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto minimum = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  double pool_s = median(pool_t), inproc_s = median(inproc_t), stock_s = median(stock_t);
  char ours[64];
  std::snprintf(ours, sizeof ours, "%.2f", sum);
  std::printf("{\"bench\":\"lua_function_records\",\"records\":%d,\"repeat\":%d,\"worker_pool_s\":%.4f,"
              "\"in_process_s\":%.4f,\"stock_lua_s\":%.4f,\"ratio_pool_over_stock\":%.3f,"
              "\"ratio_in_process_over_stock\":%.3f,\"ratio_of_minimums_pool_over_stock\":%.3f,"
              "\"per_record_us_pool\":%.3f,\"per_record_us_stock\":%.3f,\"failed\":%zu,\"checksums_equal\":%s}\n",
              records, repeat, pool_s, inproc_s, stock_s, pool_s / stock_s, inproc_s / stock_s,
              minimum(pool_t) / minimum(stock_t), pool_s / records * 1e6, stock_s / records * 1e6, failed,
              stock_sum == ours ? "true" : "false");
  if (!local.ok()) std::cerr << local.status() << "\n";
}

void BenchRegex(size_t megabytes, const std::string& grep) {
  const char* pattern = "INV-[0-9]{4}-[0-9]{4}";
  std::string text;
  text.reserve(megabytes << 20);
  size_t expected = 0;
  for (uint64_t i = 0; text.size() < (megabytes << 20); ++i) {
    text += "Dear customer, regarding order ";
    text += std::to_string(i * 7919 % 100000);
    if (i % 3 == 0) {
      text += " please pay INV-20" + std::to_string(10 + i % 90) + "-" + std::to_string(1000 + i % 9000);
      ++expected;
    }
    text += " before the end of the month. Kind regards, accounts (ref 12-34-5678)\n";
  }
  std::string path = "/tmp/rote_bench_sandbox_regex.txt";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  double mb = static_cast<double>(text.size()) / (1 << 20);
  auto re = rote::sandbox::Re2Matcher::Compile(pattern);
  if (!re.ok()) return;
  // Physical reference: one memchr pass over the buffer for a byte that never occurs.
  auto t0 = Clock::now();
  const void* hit = std::memchr(text.data(), 0x01, text.size());
  double scan_s = Seconds(t0);
  size_t count = 0;
  t0 = Clock::now();
  re->ForEachMatch(text, [&](size_t, size_t) { ++count; });
  double re2_s = Seconds(t0);
  std::string cmd = grep + " -oE '" + pattern + "' " + path + " | wc -l";
  t0 = Clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  char buf[64] = {0};
  size_t n = p ? fread(buf, 1, sizeof buf - 1, p) : 0;
  if (p) pclose(p);
  double grep_s = Seconds(t0);
  size_t grep_count = std::strtoull(std::string(buf, n).c_str(), nullptr, 10);
  std::printf("{\"bench\":\"re2_find_all\",\"pattern\":\"%s\",\"mb\":%.1f,\"matches\":%zu,\"grep_matches\":%zu,"
              "\"expected\":%zu,\"re2_s\":%.4f,\"re2_mb_s\":%.1f,\"grep_s\":%.4f,\"grep_mb_s\":%.1f,"
              "\"ratio_re2_time_over_grep\":%.3f,\"memchr_scan_mb_s\":%.1f%s}\n",
              pattern, mb, count, grep_count, expected, re2_s, mb / re2_s, grep_s, mb / grep_s, re2_s / grep_s,
              mb / scan_s, hit ? ",\"note\":\"scan byte found\"" : "");
  std::remove(path.c_str());
}

void BenchLatency(int calls) {
  rote::sandbox::WorkerPoolOptions o;
  o.num_workers = 1;
  auto pool = rote::sandbox::WorkerPool::Start(o);
  if (!pool.ok()) return;
  std::vector<double> us;
  us.reserve(calls);
  rote::sandbox::Map m;
  m["id"] = Value::Int(1);
  m["text"] = Value::String(RecordText(1));
  std::vector<Value> one = {Value::FromMap(m)};
  for (int i = 0; i < calls + 50; ++i) {
    auto t0 = Clock::now();
    auto out = (*pool)->Call(kParseAmount, "parse_amount.lua", one, {});
    double t = Seconds(t0) * 1e6;
    if (!out.ok()) return;
    if (i >= 50) us.push_back(t);  // the first calls warm the worker
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  std::printf("{\"bench\":\"worker_call_latency\",\"calls\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f}\n",
              calls, pct(0.5), pct(0.99), us.back());
}

}  // namespace

int main(int argc, char** argv) {
  int records = 100'000;
  size_t regex_mb = 128;
  int latency_calls = 2000;
  int repeat = 5;
  std::string lua = "/usr/bin/lua5.4", grep = "grep";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--records") records = std::atoi(argv[i + 1]);
    else if (f == "--regex-mb") regex_mb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (f == "--latency-calls") latency_calls = std::atoi(argv[i + 1]);
    else if (f == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (f == "--lua") lua = argv[i + 1];
    else if (f == "--grep") grep = argv[i + 1];
  }
  BenchLuaFunction(records, repeat, lua);
  BenchRegex(regex_mb, grep);
  BenchLatency(latency_calls);
  return 0;
}
