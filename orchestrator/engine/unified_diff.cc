#include "orchestrator/engine/unified_diff.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rote::orchestrator::engine {

namespace {

std::vector<std::string_view> Lines(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string_view::npos) {
      out.push_back(s.substr(start));
      break;
    }
    out.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

enum class Op { kKeep, kDelete, kInsert };
struct Edit {
  Op op;
  size_t a;  // line index in `from` (kKeep, kDelete)
  size_t b;  // line index in `to` (kKeep, kInsert)
};

// Longest common subsequence by dynamic programming: O(n*m), fine for reviewed code (the
// server caps artifact sizes well below where this matters).
std::vector<Edit> Diff(const std::vector<std::string_view>& a, const std::vector<std::string_view>& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  std::vector<Edit> edits;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      edits.push_back({Op::kKeep, i++, j++});
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      // Deletions before insertions, as diff -u writes a replaced line.
      edits.push_back({Op::kDelete, i++, j});
    } else {
      edits.push_back({Op::kInsert, i, j++});
    }
  }
  return edits;
}

void AppendLine(std::string* out, char mark, std::string_view line) {
  out->push_back(mark);
  out->append(line);
  out->push_back('\n');
}

std::string Range(size_t start, size_t count) {
  // diff -u writes an empty range as "start,0" where start is the line before it.
  if (count == 0) return absl::StrCat(start, ",0");
  if (count == 1) return absl::StrCat(start + 1);
  return absl::StrCat(start + 1, ",", count);
}

}  // namespace

std::string UnifiedDiff(std::string_view from, std::string_view to, std::string_view from_label,
                        std::string_view to_label, int context) {
  if (from == to) return "";
  const std::vector<std::string_view> a = Lines(from), b = Lines(to);
  const std::vector<Edit> edits = Diff(a, b);
  std::string out = absl::StrCat("--- ", std::string(from_label), "\n+++ ", std::string(to_label), "\n");
  const size_t ctx = static_cast<size_t>(std::max(context, 0));
  size_t k = 0;
  while (k < edits.size()) {
    if (edits[k].op == Op::kKeep) {
      ++k;
      continue;
    }
    // A hunk: from `ctx` lines before this change to `ctx` lines after the last change that is
    // within 2*ctx lines of the previous one.
    size_t start = k >= ctx ? k - ctx : 0;
    size_t end = k;
    size_t keeps = 0;
    for (size_t e = k; e < edits.size(); ++e) {
      if (edits[e].op == Op::kKeep) {
        if (++keeps > 2 * ctx) break;
      } else {
        keeps = 0;
        end = e;
      }
    }
    size_t stop = std::min(edits.size(), end + 1 + ctx);
    size_t a_start = edits[start].a, b_start = edits[start].b, a_count = 0, b_count = 0;
    std::string body;
    for (size_t e = start; e < stop; ++e) {
      switch (edits[e].op) {
        case Op::kKeep: AppendLine(&body, ' ', a[edits[e].a]); ++a_count; ++b_count; break;
        case Op::kDelete: AppendLine(&body, '-', a[edits[e].a]); ++a_count; break;
        case Op::kInsert: AppendLine(&body, '+', b[edits[e].b]); ++b_count; break;
      }
    }
    absl::StrAppend(&out, "@@ -", Range(a_start, a_count), " +", Range(b_start, b_count), " @@\n", body);
    k = stop;
  }
  return out;
}

}  // namespace rote::orchestrator::engine
