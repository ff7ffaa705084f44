// UTF-8 helpers shared by the tokenizer and its stream decoder. Invalid input is handled the
// way Rust's String::from_utf8_lossy and Python's errors="replace" do it (Unicode's "maximal
// subpart" practice): each maximal invalid subsequence becomes one U+FFFD, so replacement
// composes across chunk boundaries that StreamablePrefixLength chooses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rote::inference::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// `text` with every maximal invalid subpart replaced by U+FFFD.
std::string Sanitize(std::string_view text);

// Whether `text` is entirely valid UTF-8.
bool IsValid(std::string_view text);

// Length of the longest prefix of `bytes` that does not end inside a character that later bytes
// could still complete. The rest (at most 3 bytes) is a valid but unfinished character start.
size_t StreamablePrefixLength(std::string_view bytes);

// Decodes the code point starting at `pos` of valid UTF-8 and advances `pos`.
char32_t DecodeAt(std::string_view text, size_t& pos);

void Append(std::string& out, char32_t cp);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool IsWhitespace(char32_t cp);

// Python's str.isspace(): White_Space plus the information separators U+001C..U+001F.
bool IsPythonSpace(char32_t cp);

// A "word" character for single_word added tokens: letters, marks, digits, connector
// punctuation (includes '_').
bool IsWordChar(char32_t cp);

}  // namespace rote::inference::utf8
