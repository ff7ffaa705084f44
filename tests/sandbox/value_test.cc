#include "sandbox/value.h"

#include <gtest/gtest.h>

namespace rote::sandbox {
namespace {

std::string Canon(std::string_view json) {
  auto v = ParseJson(json);
  EXPECT_TRUE(v.ok()) << v.status();
  if (!v.ok()) return "";
  auto c = CanonicalJson(*v);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : "";
}

TEST(ValueTest, IntegersAndFloatsStayApart) {
  auto v = ParseJson("[1, 1.0, 1e2, -0, -0.0, 9223372036854775807]");
  ASSERT_TRUE(v.ok());
  const Array& a = v->as_array();
  EXPECT_TRUE(a[0].is_int());
  EXPECT_TRUE(a[1].is_float());
  EXPECT_TRUE(a[2].is_float());
  EXPECT_TRUE(a[3].is_int());
  EXPECT_TRUE(a[4].is_float());
  EXPECT_EQ(a[5].as_int(), INT64_MAX);
  EXPECT_EQ(*CanonicalJson(*v), "[1,1.0,100.0,0,-0.0,9223372036854775807]");
  EXPECT_FALSE(Value::Int(1) == Value::Float(1.0));
}

TEST(ValueTest, CanonicalSortsKeysBytewiseAndIsIdempotent) {
  EXPECT_EQ(Canon(R"({"b":1,"a":{"z":null,"y":[true,false]},"B":2,"\u00e9":3,"aa":4})"),
            R"({"B":2,"a":{"y":[true,false],"z":null},"aa":4,"b":1,"é":3})");
  std::string once = Canon(R"({"x": [0.1, 1e300, 5e-324, 123456789.125], "s": "a\"\\\n\u0001\u2028"})");
  EXPECT_EQ(once, R"({"s":"a\"\\\n\u0001)" "\xe2\x80\xa8" R"(","x":[0.1,1e+300,5e-324,123456789.125]})");
  EXPECT_EQ(Canon(once), once);
}

TEST(ValueTest, ShortestRoundTripFloats) {
  for (double d : {0.1, 0.2 + 0.1, 1.0 / 3.0, 2.5e-308, 1.7976931348623157e308, 100.0, -1e21}) {
    auto c = CanonicalJson(Value::Float(d));
    ASSERT_TRUE(c.ok());
    auto back = ParseJson(*c);
    ASSERT_TRUE(back.ok()) << *c;
    ASSERT_TRUE(back->is_float()) << *c;
    EXPECT_EQ(back->as_float(), d) << *c;
  }
  EXPECT_EQ(*CanonicalJson(Value::Float(0.30000000000000004)), "0.30000000000000004");
}

TEST(ValueTest, NonFiniteAndInvalidUtf8AreErrors) {
  EXPECT_FALSE(CanonicalJson(Value::Float(std::numeric_limits<double>::quiet_NaN())).ok());
  auto inf = CanonicalJson(Value::Float(std::numeric_limits<double>::infinity()));
  ASSERT_FALSE(inf.ok());
  EXPECT_NE(inf.status().message().find("infinity"), std::string::npos);
  EXPECT_FALSE(CanonicalJson(Value::String("\xff")).ok());
  EXPECT_FALSE(CanonicalJson(Value::String("\xed\xa0\x80")).ok());  // surrogate
  EXPECT_FALSE(CanonicalJson(Value::String("\xc0\xaf")).ok());      // overlong
}

TEST(ValueTest, MalformedJsonNamesTheProblem) {
  struct Case { const char* text; const char* needle; };
  for (const Case& c : {Case{"", "end of input"}, Case{"[1,]", "unexpected"}, Case{"{\"a\":1,\"a\":2}", "duplicate"},
                        Case{"01", "leading zero"}, Case{"1 2", "trailing"}, Case{"\"\\ud800\"", "surrogate"},
                        Case{"99999999999999999999", "int64"}, Case{"1e999", "double range"},
                        Case{"\"\x01\"", "control"}, Case{"[1", "unterminated"}, Case{"nul", "unexpected"},
                        Case{"\"\xff\"", "UTF-8"}}) {
    auto v = ParseJson(c.text);
    ASSERT_FALSE(v.ok()) << c.text;
    EXPECT_NE(v.status().message().find(c.needle), std::string::npos) << c.text << " -> " << v.status();
  }
  std::string deep(kMaxJsonDepth + 5, '[');
  deep += std::string(kMaxJsonDepth + 5, ']');
  EXPECT_FALSE(ParseJson(deep).ok());
}

}  // namespace
}  // namespace rote::sandbox
