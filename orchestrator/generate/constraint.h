// The grammar a generation point's reply is held to (docs/generation.md, "Constrained
// replies"): a Lua point's reply is one ```lua block whose chunk returns a function and reads
// only names the sandbox provides; an RE2 point's is one ```re2 block with a pattern RE2
// accepts. Both grammars ship with the inference engine (docs/grammar.md).
#pragma once

#include <string>

#include "orchestrator/engine/spec.h"
#include "orchestrator/generate/code_model.h"
#include "orchestrator/generate/lua_names.h"

namespace rote::orchestrator::generate {

// The constraint of a point of this kind: "lua_reply" with the sandbox's base names and
// library tables as the globals a chunk may read, or "re2_reply".
CompletionConstraint ReplyConstraint(engine::ArtifactKind kind, const SandboxNames& names);

// inference::GrammarDigest of the constraint: what Decoding::grammar records.
std::string ConstraintDigest(const CompletionConstraint& constraint);

}  // namespace rote::orchestrator::generate
