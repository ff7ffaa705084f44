-- String comparison (strcoll), number formatting and parsing follow the C locale.
return function(input)
  print("a" < "B", "B" < "a", "\xc3\xa9" < "z", "abc" < "abd", "" < "a")
  print(0.1 + 0.2, 1 / 3, -0.0, 1e300 * 10, -1e300 * 10, 2^53, 2^63, math.maxinteger + 1)
  print(7 // 2, 7.0 // 2, -7 // 2, 7 % -3, -7 % 3, 7.5 % 2, 3 / 2, 4 / 2, 1e15, 1e16, 123456789012)
  print(string.format("%.3f|%5.1f|%g|%e|%d|%x|%q", 3.14159, 2.25, 1e20, 12345.678, 42, 255, "a\nb"))
  print(tonumber("1.5"), tonumber("0x10"), tonumber("  12  "), tonumber("1e3"), tonumber("1,5"), tonumber("z", 36))
  print(math.floor(-3.5), math.ceil(-3.5), math.tointeger(3.0), math.sqrt(2), math.abs(math.mininteger), math.fmod(7, 3))
  print(math.type(1), math.type(1.0), math.type("1"), 1 == 1.0, math.ult(1, -1))
  print(("%5.2f"):format(1 / 7), #"h\xc3\xa9llo", utf8.len("h\xc3\xa9llo"), ("abc"):rep(3, "-"), ("Hello"):upper(), ("Hello"):byte(1, -1))
  return { sum = 0.1 + 0.2, big = 2^63, int = 9007199254740993, neg_zero = -0.0, third = 1 / 3 }
end
