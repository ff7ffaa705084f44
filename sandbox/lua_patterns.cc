// Lua 5.4 patterns (string.find, match, gmatch, gsub) reimplemented with a step counter.
//
// Same semantics and error messages as the stock string library, with two differences that
// the deterministic profile needs: every step of the backtracking matcher is charged to the
// instruction budget (the stock matcher can run for exponential time inside one C call, where
// the count hook cannot see it), and character classes (%a, %d, %s, ...) are ASCII-only, never
// the host locale's <ctype.h> tables. A step is one unit; work within a step that grows with
// the script's strings (scanning a bracket class, comparing a back-reference, copying a
// replacement) is charged one unit per 16 bytes on top.
#include <cstring>
#include <lua.hpp>

#include "sandbox/lua_internal.h"
#include "sandbox/lua_profile.h"
#include "sandbox/lua_runtime.h"

namespace rote::sandbox::internal {
namespace {

constexpr char kEsc = '%';
constexpr const char* kSpecials = "^$*+?.([%-";
constexpr int kMaxCaptures = 32;
constexpr int kMaxMatchDepth = 200;
constexpr ptrdiff_t kCapUnfinished = -1;
constexpr ptrdiff_t kCapPosition = -2;
constexpr uint64_t kStepsPerCharge = 1024;

struct MatchState {
  const char* src_init;
  const char* src_end;
  const char* p_end;
  lua_State* L;
  int matchdepth;
  int level;
  uint64_t steps;
  struct {
    const char* init;
    ptrdiff_t len;
  } capture[kMaxCaptures];
};

inline void Step(MatchState* ms, uint64_t n = 1) {
  ms->steps += n;
  if (ms->steps >= kStepsPerCharge) {
    uint64_t s = ms->steps;
    ms->steps = 0;
    LuaState::Charge(ms->L, s);
  }
}

void FlushSteps(MatchState* ms) {
  if (ms->steps > 0) {
    uint64_t s = ms->steps;
    ms->steps = 0;
    LuaState::Charge(ms->L, s);
  }
}

bool IsUpper(int c) { return c >= 'A' && c <= 'Z'; }
bool IsLower(int c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(int c) { return c >= '0' && c <= '9'; }
bool IsAlpha(int c) { return IsUpper(c) || IsLower(c); }
bool IsAlnum(int c) { return IsAlpha(c) || IsDigit(c); }
bool IsGraph(int c) { return c > 32 && c < 127; }

bool MatchClass(int c, int cl) {
  bool res;
  switch (cl | 0x20) {  // ASCII tolower for letters
    case 'a': res = IsAlpha(c); break;
    case 'c': res = c < 32 || c == 127; break;
    case 'd': res = IsDigit(c); break;
    case 'g': res = IsGraph(c); break;
    case 'l': res = IsLower(c); break;
    case 'p': res = IsGraph(c) && !IsAlnum(c); break;
    case 's': res = c == ' ' || (c >= '\t' && c <= '\r'); break;
    case 'u': res = IsUpper(c); break;
    case 'w': res = IsAlnum(c); break;
    case 'x': res = IsDigit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); break;
    default: return cl == c;
  }
  if (!IsAlpha(cl)) return cl == c;
  return IsUpper(cl) ? !res : res;
}

bool MatchBracketClass(int c, const char* p, const char* ec) {
  bool sig = true;
  if (*(p + 1) == '^') {
    sig = false;
    p++;
  }
  while (++p < ec) {
    if (*p == kEsc) {
      p++;
      if (MatchClass(c, static_cast<unsigned char>(*p))) return sig;
    } else if (*(p + 1) == '-' && (p + 2 < ec)) {
      p += 2;
      if (static_cast<unsigned char>(*(p - 2)) <= c && c <= static_cast<unsigned char>(*p)) return sig;
    } else if (static_cast<unsigned char>(*p) == c) {
      return sig;
    }
  }
  return !sig;
}

const char* ClassEnd(MatchState* ms, const char* p) {
  switch (*p++) {
    case kEsc:
      if (p == ms->p_end) luaL_error(ms->L, "malformed pattern (ends with '%%')");
      return p + 1;
    case '[':
      if (*p == '^') p++;
      do {  // look for a ']'; patterns are Lua strings, so *p_end is a readable '\0'
        if (p == ms->p_end) luaL_error(ms->L, "malformed pattern (missing ']')");
        if (*(p++) == kEsc && p < ms->p_end) p++;
      } while (*p != ']');
      return p + 1;
    default:
      return p;
  }
}

// Units beyond the step for matching one character against the pattern item [p, ep): a
// bracket class is scanned from its start each time (and so is finding its end), so a long
// class costs in proportion to its length.
uint64_t ItemCost(const char* p, const char* ep) { return static_cast<uint64_t>(ep - p) / kBytesPerCharge; }

bool SingleMatch(MatchState* ms, const char* s, const char* p, const char* ep) {
  if (s >= ms->src_end) return false;
  int c = static_cast<unsigned char>(*s);
  switch (*p) {
    case '.': return true;
    case kEsc: return MatchClass(c, static_cast<unsigned char>(*(p + 1)));
    case '[': return MatchBracketClass(c, p, ep - 1);
    default: return static_cast<unsigned char>(*p) == c;
  }
}

const char* Match(MatchState* ms, const char* s, const char* p);

const char* MatchBalance(MatchState* ms, const char* s, const char* p) {
  if (p >= ms->p_end - 1) luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
  if (s >= ms->src_end || *s != *p) return nullptr;
  int b = *p, e = *(p + 1), cont = 1;
  while (++s < ms->src_end) {
    Step(ms);
    if (*s == e) {
      if (--cont == 0) return s + 1;
    } else if (*s == b) {
      cont++;
    }
  }
  return nullptr;
}

const char* MaxExpand(MatchState* ms, const char* s, const char* p, const char* ep) {
  ptrdiff_t i = 0;
  while (SingleMatch(ms, s + i, p, ep)) {
    Step(ms, 1 + ItemCost(p, ep));
    i++;
  }
  while (i >= 0) {  // try with the longest repetition first, then back off
    const char* res = Match(ms, s + i, ep + 1);
    if (res) return res;
    i--;
  }
  return nullptr;
}

const char* MinExpand(MatchState* ms, const char* s, const char* p, const char* ep) {
  for (;;) {
    const char* res = Match(ms, s, ep + 1);
    if (res != nullptr) return res;
    Step(ms, ItemCost(p, ep));
    if (!SingleMatch(ms, s, p, ep)) return nullptr;
    s++;
  }
}

const char* StartCapture(MatchState* ms, const char* s, const char* p, ptrdiff_t what) {
  int level = ms->level;
  if (level >= kMaxCaptures) luaL_error(ms->L, "too many captures");
  ms->capture[level].init = s;
  ms->capture[level].len = what;
  ms->level = level + 1;
  const char* res = Match(ms, s, p);
  if (res == nullptr) ms->level--;
  return res;
}

int CaptureToClose(MatchState* ms) {
  int level = ms->level;
  for (level--; level >= 0; level--) {
    if (ms->capture[level].len == kCapUnfinished) return level;
  }
  return luaL_error(ms->L, "invalid pattern capture");
}

const char* EndCapture(MatchState* ms, const char* s, const char* p) {
  int l = CaptureToClose(ms);
  ms->capture[l].len = s - ms->capture[l].init;
  const char* res = Match(ms, s, p);
  if (res == nullptr) ms->capture[l].len = kCapUnfinished;
  return res;
}

int CheckCapture(MatchState* ms, int l) {
  l -= '1';
  if (l < 0 || l >= ms->level || ms->capture[l].len == kCapUnfinished) {
    return luaL_error(ms->L, "invalid capture index %%%d", l + 1);
  }
  return l;
}

const char* MatchCapture(MatchState* ms, const char* s, int l) {
  l = CheckCapture(ms, l);
  size_t len = static_cast<size_t>(ms->capture[l].len);
  Step(ms, len / kBytesPerCharge);
  if (static_cast<size_t>(ms->src_end - s) >= len && std::memcmp(ms->capture[l].init, s, len) == 0) {
    return s + len;
  }
  return nullptr;
}

const char* Match(MatchState* ms, const char* s, const char* p) {
  if (ms->matchdepth-- == 0) luaL_error(ms->L, "pattern too complex");
  while (true) {
    Step(ms);
    if (p == ms->p_end) break;
    switch (*p) {
      case '(':
        if (*(p + 1) == ')') s = StartCapture(ms, s, p + 2, kCapPosition);
        else s = StartCapture(ms, s, p + 1, kCapUnfinished);
        goto done;
      case ')':
        s = EndCapture(ms, s, p + 1);
        goto done;
      case '$':
        if (p + 1 != ms->p_end) goto single;
        s = (s == ms->src_end) ? s : nullptr;
        goto done;
      case kEsc:
        switch (*(p + 1)) {
          case 'b':
            s = MatchBalance(ms, s, p + 2);
            if (s != nullptr) {
              p += 4;
              continue;
            }
            goto done;
          case 'f': {
            p += 2;
            if (*p != '[') luaL_error(ms->L, "missing '[' after '%%f' in pattern");
            const char* ep = ClassEnd(ms, p);
            Step(ms, 2 * ItemCost(p, ep));  // ClassEnd and two class matches
            int previous = (s == ms->src_init) ? '\0' : static_cast<unsigned char>(*(s - 1));
            int current = (s < ms->src_end) ? static_cast<unsigned char>(*s) : '\0';
            if (!MatchBracketClass(previous, p, ep - 1) && MatchBracketClass(current, p, ep - 1)) {
              p = ep;
              continue;
            }
            s = nullptr;
            goto done;
          }
          case '0': case '1': case '2': case '3': case '4':
          case '5': case '6': case '7': case '8': case '9':
            s = MatchCapture(ms, s, static_cast<unsigned char>(*(p + 1)));
            if (s != nullptr) {
              p += 2;
              continue;
            }
            goto done;
          default:
            goto single;
        }
      default:
      single: {
        const char* ep = ClassEnd(ms, p);
        Step(ms, ItemCost(p, ep));  // ClassEnd and the match below
        if (!SingleMatch(ms, s, p, ep)) {
          if (*ep == '*' || *ep == '?' || *ep == '-') {  // accept empty
            p = ep + 1;
            continue;
          }
          s = nullptr;
        } else {
          switch (*ep) {
            case '?': {
              const char* res = Match(ms, s + 1, ep + 1);
              if (res != nullptr) {
                s = res;
              } else {
                p = ep + 1;
                continue;
              }
              break;
            }
            case '+': s = MaxExpand(ms, s + 1, p, ep); break;
            case '*': s = MaxExpand(ms, s, p, ep); break;
            case '-': s = MinExpand(ms, s, p, ep); break;
            default:
              s++;
              p = ep;
              continue;
          }
        }
        goto done;
      }
    }
  }
done:
  ms->matchdepth++;
  return s;
}

size_t GetOneCapture(MatchState* ms, int i, const char* s, const char* e, const char** cap) {
  if (i >= ms->level) {
    if (i != 0) luaL_error(ms->L, "invalid capture index %%%d", i + 1);
    *cap = s;
    return static_cast<size_t>(e - s);
  }
  ptrdiff_t capl = ms->capture[i].len;
  *cap = ms->capture[i].init;
  if (capl == kCapUnfinished) luaL_error(ms->L, "unfinished capture");
  if (capl == kCapPosition) lua_pushinteger(ms->L, (ms->capture[i].init - ms->src_init) + 1);
  return static_cast<size_t>(capl);
}

void PushOneCapture(MatchState* ms, int i, const char* s, const char* e) {
  const char* cap;
  size_t l = GetOneCapture(ms, i, s, e, &cap);
  if (l != static_cast<size_t>(kCapPosition)) lua_pushlstring(ms->L, cap, l);
}

int PushCaptures(MatchState* ms, const char* s, const char* e) {
  int nlevels = (ms->level == 0 && s) ? 1 : ms->level;
  luaL_checkstack(ms->L, nlevels, "too many captures");
  for (int i = 0; i < nlevels; i++) PushOneCapture(ms, i, s, e);
  return nlevels;
}

bool NoSpecials(const char* p, size_t l) {
  for (size_t i = 0; i < l; ++i) {
    if (std::strchr(kSpecials, p[i]) != nullptr && p[i] != '\0') return false;
  }
  return true;
}

void PrepState(MatchState* ms, lua_State* L, const char* s, size_t ls, const char* p, size_t lp) {
  ms->L = L;
  ms->matchdepth = kMaxMatchDepth;
  ms->src_init = s;
  ms->src_end = s + ls;
  ms->p_end = p + lp;
  ms->steps = 0;
  ms->level = 0;
}

void ReprepState(MatchState* ms) {
  ms->level = 0;
  ms->matchdepth = kMaxMatchDepth;
}

int FindAux(lua_State* L, bool find) {
  ChargeCall(L, 0, 3, 3);  // a string `init` is converted by scanning it
  size_t ls, lp;
  const char* s = luaL_checklstring(L, 1, &ls);
  const char* p = luaL_checklstring(L, 2, &lp);
  size_t init = PosRelatI(luaL_optinteger(L, 3, 1), ls) - 1;
  if (init > ls) {
    lua_pushnil(L);
    return 1;
  }
  if (find && (lua_toboolean(L, 4) || NoSpecials(p, lp))) {
    // glibc memmem is the two-way algorithm: linear in both lengths.
    LuaState::Charge(L, 1 + (ls - init + lp) / kBytesPerCharge);
    const void* hit = lp == 0 ? s + init : memmem(s + init, ls - init, p, lp);
    if (hit != nullptr) {
      const char* s2 = static_cast<const char*>(hit);
      lua_pushinteger(L, (s2 - s) + 1);
      lua_pushinteger(L, (s2 - s) + static_cast<lua_Integer>(lp));
      return 2;
    }
  } else {
    MatchState ms;
    const char* s1 = s + init;
    bool anchor = (*p == '^');
    if (anchor) {
      p++;
      lp--;
    }
    PrepState(&ms, L, s, ls, p, lp);
    do {
      ReprepState(&ms);
      const char* res = Match(&ms, s1, p);
      if (res != nullptr) {
        FlushSteps(&ms);
        if (find) {
          lua_pushinteger(L, (s1 - s) + 1);
          lua_pushinteger(L, res - s);
          return PushCaptures(&ms, nullptr, nullptr) + 2;
        }
        return PushCaptures(&ms, s1, res);
      }
    } while (s1++ < ms.src_end && !anchor);
    FlushSteps(&ms);
  }
  lua_pushnil(L);
  return 1;
}

int StrFind(lua_State* L) { return FindAux(L, true); }
int StrMatch(lua_State* L) { return FindAux(L, false); }

struct GMatchState {
  const char* src;
  const char* p;
  const char* lastmatch;
  MatchState ms;
};

int GMatchStep(lua_State* L) {
  auto* gm = static_cast<GMatchState*>(lua_touserdata(L, lua_upvalueindex(3)));
  gm->ms.L = L;  // the iterator may be resumed from another coroutine
  for (const char* src = gm->src; src <= gm->ms.src_end; src++) {
    ReprepState(&gm->ms);
    const char* e = Match(&gm->ms, src, gm->p);
    if (e != nullptr && e != gm->lastmatch) {
      gm->src = gm->lastmatch = e;
      FlushSteps(&gm->ms);
      return PushCaptures(&gm->ms, src, e);
    }
  }
  FlushSteps(&gm->ms);
  return 0;
}

int StrGMatch(lua_State* L) {
  ChargeCall(L, 0, 3, 3);
  size_t ls, lp;
  const char* s = luaL_checklstring(L, 1, &ls);
  const char* p = luaL_checklstring(L, 2, &lp);
  size_t init = PosRelatI(luaL_optinteger(L, 3, 1), ls) - 1;
  lua_settop(L, 2);  // the closure keeps both strings alive
  auto* gm = static_cast<GMatchState*>(lua_newuserdatauv(L, sizeof(GMatchState), 0));
  if (init > ls) init = ls + 1;
  PrepState(&gm->ms, L, s, ls, p, lp);
  gm->src = s + init;
  gm->p = p;
  gm->lastmatch = nullptr;
  lua_pushcclosure(L, GMatchStep, 3);
  return 1;
}

void AddString(MatchState* ms, luaL_Buffer* b, const char* s, const char* e) {
  size_t l;
  lua_State* L = ms->L;
  const char* news = lua_tolstring(L, 3, &l);
  const char* p;
  while ((p = static_cast<const char*>(std::memchr(news, kEsc, l))) != nullptr) {
    luaL_addlstring(b, news, p - news);
    p++;
    if (*p == kEsc) {
      luaL_addchar(b, *p);
    } else if (*p == '0') {
      luaL_addlstring(b, s, e - s);
    } else if (IsDigit(static_cast<unsigned char>(*p))) {
      const char* cap;
      size_t resl = GetOneCapture(ms, *p - '1', s, e, &cap);
      if (resl == static_cast<size_t>(kCapPosition)) luaL_addvalue(b);
      else luaL_addlstring(b, cap, resl);
    } else {
      luaL_error(L, "invalid use of '%c' in replacement string", kEsc);
    }
    l -= p + 1 - news;
    news = p + 1;
  }
  luaL_addlstring(b, news, l);
}

bool AddValue(MatchState* ms, luaL_Buffer* b, const char* s, const char* e, int tr) {
  lua_State* L = ms->L;
  switch (tr) {
    case LUA_TFUNCTION: {
      lua_pushvalue(L, 3);
      int n = PushCaptures(ms, s, e);
      lua_call(L, n, 1);
      break;
    }
    case LUA_TTABLE:
      PushOneCapture(ms, 0, s, e);
      lua_gettable(L, 3);
      break;
    default:
      // The replacement is scanned for '%' and copied at every match.
      Step(ms, lua_rawlen(L, 3) / kBytesPerCharge);
      AddString(ms, b, s, e);
      return true;
  }
  if (!lua_toboolean(L, -1)) {  // nil or false: keep the original text
    lua_pop(L, 1);
    luaL_addlstring(b, s, e - s);
    return false;
  }
  if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  }
  luaL_addvalue(b);
  return true;
}

int StrGsub(lua_State* L) {
  ChargeCall(L, 0, 4, 4);
  size_t srcl, lp;
  const char* src = luaL_checklstring(L, 1, &srcl);
  const char* p = luaL_checklstring(L, 2, &lp);
  const char* lastmatch = nullptr;
  int tr = lua_type(L, 3);
  lua_Integer max_s = luaL_optinteger(L, 4, static_cast<lua_Integer>(srcl) + 1);
  bool anchor = (*p == '^');
  lua_Integer n = 0;
  bool changed = false;
  luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE,
                   3, "string/function/table");
  MatchState ms;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  if (anchor) {
    p++;
    lp--;
  }
  PrepState(&ms, L, src, srcl, p, lp);
  while (n < max_s) {
    ReprepState(&ms);
    const char* e = Match(&ms, src, p);
    if (e != nullptr && e != lastmatch) {
      n++;
      // Replacement text is charged like any other copy.
      Step(&ms, 1 + static_cast<uint64_t>(e - src) / kBytesPerCharge);
      changed = AddValue(&ms, &b, src, e, tr) || changed;
      src = lastmatch = e;
    } else if (src < ms.src_end) {
      luaL_addchar(&b, *src++);
    } else {
      break;
    }
    if (anchor) break;
  }
  FlushSteps(&ms);
  if (!changed) {
    lua_pushvalue(L, 1);
  } else {
    luaL_addlstring(&b, src, ms.src_end - src);
    luaL_pushresult(&b);
  }
  lua_pushinteger(L, n);
  return 2;
}

}  // namespace

void InstallPatternFunctions(lua_State* L, int string_lib) {
  string_lib = lua_absindex(L, string_lib);
  lua_pushcfunction(L, StrFind);
  lua_setfield(L, string_lib, "find");
  lua_pushcfunction(L, StrMatch);
  lua_setfield(L, string_lib, "match");
  lua_pushcfunction(L, StrGMatch);
  lua_setfield(L, string_lib, "gmatch");
  lua_pushcfunction(L, StrGsub);
  lua_setfield(L, string_lib, "gsub");
}

}  // namespace rote::sandbox::internal
