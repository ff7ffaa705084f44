#include "orchestrator/generate/constraint.h"

#include "inference/engine.h"

namespace rote::orchestrator::generate {

CompletionConstraint ReplyConstraint(engine::ArtifactKind kind, const SandboxNames& names) {
  CompletionConstraint c;
  if (kind != engine::ArtifactKind::kLuaFunction) {
    c.grammar = "re2_reply";
    return c;
  }
  c.grammar = "lua_reply";
  std::vector<std::string> globals = names.base;
  for (const auto& [library, members] : names.libraries) globals.push_back(library);
  c.allowed_globals = std::move(globals);
  return c;
}

std::string ConstraintDigest(const CompletionConstraint& constraint) {
  return inference::GrammarDigest({constraint.grammar, constraint.allowed_globals});
}

}  // namespace rote::orchestrator::generate
