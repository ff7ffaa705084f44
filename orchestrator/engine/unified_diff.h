// A unified diff (as `diff -u` writes it) between two texts, line by line, for reviewers
// comparing revisions of a generation point.
#pragma once

#include <string>
#include <string_view>

namespace rote::orchestrator::engine {

// Empty when the texts are equal. `context` lines of context around each change.
std::string UnifiedDiff(std::string_view from, std::string_view to, std::string_view from_label,
                        std::string_view to_label, int context = 3);

}  // namespace rote::orchestrator::engine
